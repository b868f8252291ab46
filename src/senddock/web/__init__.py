"""HTTP served by `senddock serve`: the API, the dashboard, the pages messages link to."""

from senddock.web.app import create_app

__all__ = ["create_app"]
