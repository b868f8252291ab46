"""The public pages' one frame: unsubscribe, confirm and sign-up pages (web/app.py,
web/subscribe.py) are a title and a body in it, with a policy that allows its style alone."""

from __future__ import annotations

import html

from starlette.responses import HTMLResponse

from senddock.web import headers

# One card on a quiet page, readable on a phone, dark where the reader's system is (issue
# 39: "unstyled black on white"). Controls are large enough to tap; the focus ring shows.
PAGE_STYLE = """\
:root{color-scheme:light dark;--bg:#f3f4f6;--card:#fff;--ink:#1f2328;--muted:#57606a;\
--line:#d0d7de;--accent:#1f6feb;--on-accent:#fff}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--card:#161b22;--ink:#e6edf3;\
--muted:#9198a1;--line:#30363d;--accent:#4493f8;--on-accent:#0d1117}}
*{box-sizing:border-box}
body{margin:0;min-height:100vh;background:var(--bg);color:var(--ink);\
font:17px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;display:grid;\
place-items:start center;padding:12vh 1rem 2rem}
main{width:100%;max-width:32rem;background:var(--card);border:1px solid var(--line);\
border-radius:12px;padding:2rem 1.75rem;box-shadow:0 1px 3px rgba(0,0,0,.06)}
h1{font-size:1.5rem;line-height:1.25;margin:0 0 1rem}
p{margin:.75rem 0}a{color:var(--accent)}
form{margin:1.25rem 0 .5rem;display:grid;gap:.75rem}
label{display:grid;gap:.25rem;font-weight:600}
input[type=email],input[type=text]{font:inherit;padding:.6rem .75rem;border:1px solid var(--line);\
border-radius:8px;background:var(--bg);color:var(--ink)}
label.check,fieldset label{display:flex;gap:.5rem;align-items:center;font-weight:400}
fieldset{border:1px solid var(--line);border-radius:8px;padding:.75rem 1rem}
table{width:100%;border-collapse:collapse;margin:1rem 0}
th,td{text-align:left;padding:.6rem .25rem;border-bottom:1px solid var(--line)}
td form{margin:0}
button{font:inherit;font-weight:600;padding:.7rem 1.4rem;border:0;border-radius:8px;\
background:var(--accent);color:var(--on-accent);cursor:pointer;justify-self:start}
button:focus-visible,a:focus-visible,input:focus-visible{outline:3px solid var(--accent);\
outline-offset:2px}
"""
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>{title}</title>
<style>{style}</style></head>
<body><main><h1>{title}</h1>{body}</main></body></html>
"""
# The pages' one inline block is their style: allowed by its hash, nothing else inline.
PAGE_POLICY = headers.policy(styles=(headers.source_hash(PAGE_STYLE),))


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    text = PAGE.format(title=html.escape(title), body=body, style=PAGE_STYLE)
    return HTMLResponse(text, status_code=status, headers={headers.CSP: PAGE_POLICY})
