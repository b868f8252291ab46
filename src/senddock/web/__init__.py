"""HTTP: the pages every message links to (unsubscribe), served by `senddock serve`."""

from senddock.web.app import create_app

__all__ = ["create_app"]
