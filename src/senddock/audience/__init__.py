"""Subscribers, lists, CSV import and the suppression list."""

from senddock.audience.importer import ImportReport, import_csv
from senddock.audience.lists import ensure_list, find_list

__all__ = ["ImportReport", "ensure_list", "find_list", "import_csv"]
