"""The public pages' one frame: unsubscribe, confirm and sign-up pages (web/app.py,
web/subscribe.py) are a title and a body in it, with a policy that allows its style alone."""

from __future__ import annotations

import html

from starlette.responses import HTMLResponse

from senddock.web import headers

PAGE_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}\n"
    "button{font:inherit;padding:.5rem 1.25rem;cursor:pointer}"
)
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{title}</title>
<style>{style}</style></head>
<body><h1>{title}</h1>{body}</body></html>
"""
# The pages' one inline block is their style: allowed by its hash, nothing else inline.
PAGE_POLICY = headers.policy(styles=(headers.source_hash(PAGE_STYLE),))


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    text = PAGE.format(title=html.escape(title), body=body, style=PAGE_STYLE)
    return HTMLResponse(text, status_code=status, headers={headers.CSP: PAGE_POLICY})
