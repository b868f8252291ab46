"""The API's description, for the people allowed to use the API: /openapi.json and /docs
(Swagger UI) need a dashboard session or an API token, like /api/v1 itself.

/openapi.json answers 401 without one (API style); /docs sends a browser without credentials
to /login and back. Its script and style come from this server (the files fastapi-offline
ships, pinned in pyproject.toml), never from a CDN: the page works offline, and the
dashboard's origin runs no script that we did not pin. No /redoc: served from local files,
Redoc still fetched its logo from cdn.redoc.ly (seen in Chromium with other hosts blocked).
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.staticfiles import StaticFiles

from senddock.web import auth, headers
from senddock.web.dashboard.gate import login_url
from senddock.web.dashboard.views import redirect

SCHEMA = "/openapi.json"
ASSETS = "/docs/static"
# No online validator badge: Swagger UI would fetch it from validator.swagger.io.
SWAGGER_PARAMETERS = {"validatorUrl": None}
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)

router = APIRouter(include_in_schema=False)


def refused(request: Request) -> Response | None:
    """None when the request may read the docs; a redirect to /login when it carries no
    credential at all (a browser); NotAuthenticated (401) for a wrong token."""
    if auth.session_admin(request) is None and "authorization" not in request.headers:
        return redirect(login_url(request))
    auth.check_request(request)
    return None


@router.get(SCHEMA, dependencies=[Depends(auth.require_api_auth)])
def openapi(request: Request) -> Response:
    """The OpenAPI document of the app (made once, then cached by FastAPI)."""
    return JSONResponse(request.app.openapi())


@router.get("/docs")
def swagger_ui(request: Request) -> Response:
    """Swagger UI over /openapi.json, its files served from ASSETS."""
    no = refused(request)
    if no is not None:
        return no
    page = get_swagger_ui_html(
        openapi_url=SCHEMA,
        title=f"{request.app.title} API",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon.png",
        swagger_ui_parameters=SWAGGER_PARAMETERS,
    )
    page.headers["Cache-Control"] = "no-store"  # a page for the signed-in only
    # Swagger UI starts from one inline script: the policy allows exactly that one.
    started = INLINE_SCRIPT.findall(bytes(page.body).decode())
    page.headers[headers.CSP] = headers.policy(scripts=tuple(map(headers.source_hash, started)))
    return page


def install(app: FastAPI) -> None:
    """The two routes and the files of the page (public: they are the library's own code and
    hold nothing of ours). The app must be made with openapi_url=None, docs_url=None and
    redoc_url=None, so that FastAPI's own public routes are not there too."""
    assert app.openapi_url is None and app.docs_url is None and app.redoc_url is None
    app.include_router(router)
    app.mount(ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-static")
