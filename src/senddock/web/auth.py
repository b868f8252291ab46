"""Who may use the API and the dashboard: API tokens, admin logins, sessions and CSRF.

API tokens are random, shown once, and stored as their SHA-256 (a token has 256 random bits,
so a fast hash is enough); one may expire. Admin passwords are hashed with argon2id. A
session is a row in Postgres (web/sessions.py) named by a random id in a signed cookie
(Starlette SessionMiddleware), which also carries the session's CSRF token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import unicodedata
from datetime import timedelta
from typing import Any

import psycopg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from fastapi import Request
from fastapi.responses import JSONResponse

from senddock.audience.addresses import normalize
from senddock.db import sql
from senddock.errors import Invalid

Conn = psycopg.Connection[dict[str, Any]]
QUERIES = sql.load(__package__, "auth.sql")

MIN_PASSWORD = 10
SESSION_CSRF = "csrf"
SESSION_ID = "sid"  # the cookie's key for the session id (web/sessions.py)
SESSION_ADMIN = "senddock_admin"  # the request state's key for the session's admin id
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_hasher = PasswordHasher()
# Verified against when the email is unknown, so both cases take the same time: the hash of a
# random password nobody kept, with _hasher's parameters (tests/test_api.py checks that they
# still match). Written here rather than hashed on import, which cost every process that
# imports this module 0.17 s of CPU (`serve`, and each `admin` and `token` command).
_DUMMY_HASH = (
    "$argon2id$v=19$m=65536,t=3,p=4$BPzWTZEwEdHZuCUNt0/grw"
    "$aTwtAdwhMcrm57HfeMKwqWm11AQT81vnSm31DH6Ar98"
)


class AuthError(Invalid, ValueError):
    """A credential that cannot be made as asked (short password, taken email); 422."""


class NotAuthenticated(Exception):
    """No valid token or session: answered with 401 JSON."""

    def __init__(self, message: str = "authentication required: send Authorization: Bearer"):
        super().__init__(message)
        self.message = message


class CsrfFailed(Exception):
    """A session request that changes something came without the session's CSRF token."""


def hash_password(password: str) -> str:
    """An argon2id hash of `password`."""
    return _hasher.hash(password)


def verify_password(hashed: str, password: str) -> bool:
    """Whether `password` matches `hashed`; False for a malformed hash too."""
    try:
        return _hasher.verify(hashed, password)
    except (VerificationError, InvalidHashError):
        return False


def create_admin(conn: Conn, email: str, password: str) -> int:
    """A new dashboard admin; its id. Refuses short passwords and taken addresses."""
    check_password(password)
    address = normalize(email)
    row = conn.execute(
        QUERIES["create_admin"], {"email": address, "password_hash": hash_password(password)}
    ).fetchone()
    if row is None:
        raise AuthError(f"an admin {address} already exists", field="email")
    return int(row["id"])


def list_admins(conn: Conn) -> list[dict[str, Any]]:
    """Every dashboard admin: id, email, created_at (never the password hash)."""
    return conn.execute(QUERIES["list_admins"]).fetchall()


def remove_admin(conn: Conn, email: str) -> bool:
    """Delete the admin with this email; False if there is none."""
    row = conn.execute(QUERIES["remove_admin"], {"email": email.strip()}).fetchone()
    return row is not None


def check_password(password: str) -> None:
    """Refuse a password too short to keep (spaces at either end do not count)."""
    if not password.strip():
        raise AuthError("the password must not be empty or only spaces", field="password")
    if len(password.strip()) < MIN_PASSWORD:
        raise AuthError(
            f"the password must have at least {MIN_PASSWORD} characters besides leading"
            " and trailing spaces",
            field="password",
        )


def set_password(conn: Conn, email: str, password: str) -> bool:
    """Give the admin with this email a new password; False if there is no such admin."""
    check_password(password)
    params = {"password_hash": hash_password(password), "email": email.strip()}
    row = conn.execute(QUERIES["set_password"], params).fetchone()
    return row is not None


def login_address(email: str) -> str:
    """The form of an address that sign-ins are judged by, here and in the attempt counts:
    compatibility forms unfolded (NFKD), combining marks dropped, case folded, recomposed.
    `admİn@…` (U+0130), `ADMIN@…` and `admin@…` are one, whatever Postgres's lower() does."""
    text = unicodedata.normalize("NFKD", email.strip())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return unicodedata.normalize("NFKC", text.casefold())


def login_hash(conn: Conn, email: str) -> tuple[int | None, str]:
    """The id and password hash of the admin `email` signs in as; (None, a dummy hash) when
    there is none, so that checking a password takes the same time either way."""
    row = conn.execute(QUERIES["login_hash"], {"email": email.strip()}).fetchone()
    # Only an admin whose address is the same login_address: the attempt was counted under it.
    if row is None or login_address(str(row["email"])) != login_address(email):
        return None, _DUMMY_HASH
    return int(row["id"]), str(row["password_hash"])


def authenticate_admin(conn: Conn, email: str, password: str) -> int | None:
    """The admin's id if the email and password match; else None (in constant-ish time)."""
    admin_id, hashed = login_hash(conn, email)
    return admin_id if verify_password(hashed, password) and admin_id is not None else None


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def create_token(conn: Conn, name: str = "", expires_in: float | None = None) -> str:
    """A new API token (shown to the caller once; only its hash is stored), refused
    `expires_in` seconds from now (database clock) when given."""
    token = "sdk_" + secrets.token_urlsafe(32)
    life = timedelta(seconds=expires_in) if expires_in is not None else None
    conn.execute(
        QUERIES["create_token"], {"name": name, "token_hash": _token_hash(token), "life": life}
    )
    return token


def list_tokens(conn: Conn) -> list[dict[str, Any]]:
    """Every API token: id, name, created_at, last_used_at, expires_at, expired (never the
    token or its hash)."""
    return conn.execute(QUERIES["list_tokens"]).fetchall()


def revoke_token(conn: Conn, token_id: int) -> bool:
    """Delete the token with this id (requests bearing it fail at once); False if none."""
    row = conn.execute(QUERIES["revoke_token"], {"token": token_id}).fetchone()
    return row is not None


def token_ok(conn: Conn, token: str) -> bool:
    """Whether `token` is a stored API token (and note when it was last used)."""
    if not token or len(token) > 200:
        return False
    row = conn.execute(QUERIES["token_ok"], {"token_hash": _token_hash(token)}).fetchone()
    return row is not None


def session_admin(request: Request) -> int | None:
    """The admin id of this request's session (resolved by sessions.SessionCheck), or None."""
    value = request.scope.get("state", {}).get(SESSION_ADMIN)
    return value if isinstance(value, int) else None


def set_session_admin(request: Request, admin_id: int | None) -> None:
    """Who this request's session belongs to from now on (sign-in, sign-out)."""
    request.scope.setdefault("state", {})[SESSION_ADMIN] = admin_id


def new_session_cookie(request: Request, session_id: str | None) -> None:
    """A fresh cookie: this session id (or none) and a new CSRF token (no fixation)."""
    request.session.clear()
    if session_id is not None:
        request.session[SESSION_ID] = session_id
    request.session[SESSION_CSRF] = secrets.token_urlsafe(32)


def csrf_token(request: Request) -> str:
    """This session's CSRF token, made on first use."""
    token = request.session.get(SESSION_CSRF)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        request.session[SESSION_CSRF] = token
    return token


def csrf_ok(request: Request, submitted: str | None) -> bool:
    """Whether `submitted` is this session's CSRF token (constant-time compare)."""
    expected = request.session.get(SESSION_CSRF)
    if not isinstance(expected, str) or not expected or not submitted:
        return False
    return hmac.compare_digest(expected.encode(), submitted.encode("utf-8", "surrogateescape"))


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def check_request(request: Request) -> None:
    """Raise NotAuthenticated / CsrfFailed unless the request carries a valid credential."""
    token = _bearer(request)
    if token is not None:
        pool = request.app.state.pool
        with pool.connection() as conn:
            if token_ok(conn, token):
                return
        raise NotAuthenticated("invalid API token")
    if session_admin(request) is not None:
        if request.method not in SAFE_METHODS and not csrf_ok(
            request, request.headers.get(CSRF_HEADER)
        ):
            raise CsrfFailed
        return
    raise NotAuthenticated()


def require_api_auth(request: Request) -> None:
    """FastAPI dependency for /api/v1: a Bearer token, or a session (+ X-CSRF-Token to change)."""
    check_request(request)


def unauthorized(message: str) -> JSONResponse:
    """The 401 answer: the error shape, and a WWW-Authenticate challenge."""
    return JSONResponse(
        {"error": {"field": None, "message": message}},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def csrf_refused() -> JSONResponse:
    return JSONResponse(
        {"error": {"field": CSRF_HEADER, "message": "missing or wrong CSRF token"}},
        status_code=403,
    )
