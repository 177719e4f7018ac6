"""What keeps the dashboard safe: basic auth, CSRF tokens, read-only mode and the headers
every response carries (a Content-Security-Policy that allows no inline script).

The CSRF token is tied to a cookie: the cookie holds a random value, and every form holds
``HMAC(secret, value)``. A POST whose form token does not match its cookie's (compared in
constant time) is refused with 403, as is any POST in read-only mode.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "culex_csrf"
CSRF_FIELD = "csrf"
# No inline script or style anywhere: the pages load theirs from static/.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'self'; "
    "form-action 'self'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "SAMEORIGIN",
}


def check_credentials(basic_auth: object) -> tuple[str, str] | None:
    """``basic_auth`` as app() takes it: None, or (user, password), both non-empty str."""
    if basic_auth is None:
        return None
    if (
        not isinstance(basic_auth, tuple)
        or len(basic_auth) != 2
        or not all(isinstance(part, str) and part for part in basic_auth)
    ):
        raise ValueError("basic_auth must be a (user, password) tuple of non-empty strings")
    if ":" in basic_auth[0]:
        raise ValueError("basic_auth: the user name cannot hold ':'")
    return (basic_auth[0], basic_auth[1])


def check_secret(secret: object) -> bytes:
    """The key of the CSRF tokens: the given str, or a random one for this app."""
    if secret is None:
        return secrets.token_bytes(32)
    if not isinstance(secret, str) or len(secret) < 16:
        raise ValueError("secret must be a str of at least 16 characters")
    return secret.encode()


class Guard:
    """ASGI middleware: basic auth (when asked) and the safety headers on every response."""

    def __init__(self, app: ASGIApp, credentials: tuple[str, str] | None) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.credentials is not None and not self._authorized(scope):
            refused = PlainTextResponse(
                "login required",
                status_code=401,
                headers={"www-authenticate": 'Basic realm="culex", charset="UTF-8"'},
            )
            await refused(scope, receive, _with_headers(send))
            return
        await self.app(scope, receive, _with_headers(send))

    def _authorized(self, scope: Scope) -> bool:
        assert self.credentials is not None
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, encoded = header.partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return False
        user, _, password = given.partition(b":")
        # Both compared, always: the time taken tells nothing of which one was wrong.
        user_ok = hmac.compare_digest(user, self.credentials[0].encode())
        password_ok = hmac.compare_digest(password, self.credentials[1].encode())
        return user_ok and password_ok


def _with_headers(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {name.lower() for name, _ in message.get("headers", [])}
            extra = [
                (k.encode(), v.encode()) for k, v in HEADERS.items() if k.encode() not in present
            ]
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return sending


def csrf_value(request: Request) -> str:
    """This browser's cookie value (made now when it has none; :func:`set_cookie` stores it)."""
    value = request.cookies.get(CSRF_COOKIE, "")
    if not _plausible(value):
        value = request.state.__dict__.setdefault("new_csrf", secrets.token_urlsafe(32))
    return value


def csrf_token(request: Request) -> str:
    """The token the forms of this page carry."""
    key: bytes = request.app.state.secret
    return hmac.new(key, csrf_value(request).encode(), hashlib.sha256).hexdigest()


def set_cookie(request: Request, response: Response) -> None:
    """Store the cookie value made for this request, if one was made."""
    value = request.state.__dict__.get("new_csrf")
    if value:
        path = request.scope.get("root_path") or "/"
        response.set_cookie(
            CSRF_COOKIE,
            value,
            path=path,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )


def refusal(request: Request, token: object) -> Response | None:
    """A 403 response when this POST may not act (read-only, or a bad token), else None."""
    if request.app.state.read_only:
        return PlainTextResponse("the dashboard is read-only", status_code=403)
    value = request.cookies.get(CSRF_COOKIE, "")
    if not isinstance(token, str) or not _plausible(value):
        return PlainTextResponse("missing CSRF token", status_code=403)
    expected = hmac.new(request.app.state.secret, value.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return PlainTextResponse("bad CSRF token", status_code=403)
    return None


def _plausible(value: str) -> bool:
    return 20 <= len(value) <= 100 and value.replace("-", "").replace("_", "").isalnum()
