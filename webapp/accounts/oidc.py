"""Single sign-on with OpenID Connect, on mozilla-django-oidc: discovery, token checks, the two views.

The library verifies the ID token's RS256 signature against the provider's JWKS and its nonce; this
module adds what it leaves out (issuer, audience, expiry, not-before, issued-at), finds endpoints in the
issuer's discovery document, links accounts by (issuer, sub) rather than by email, and turns every
failure into a message on the login page instead of an error page.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.generic import View
from josepy.errors import Error as JoseError
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from webapp.accounts.selectors import login_refusal
from webapp.accounts.signup import SsoRefused, sso_user_sign_in

logger = logging.getLogger(__name__)

# Seconds of clock difference between us and the provider that expiry and issue times forgive.
CLOCK_LEEWAY_S = 60
# How long a discovery document is trusted before it is fetched again.
DISCOVERY_TTL_S = 3600.0
GENERIC_FAILURE = "Single sign-on failed. Please try again, or log in with a password."


def oidc_enabled() -> bool:
    return bool(settings.MOONCAKE_OIDC_ISSUER and settings.OIDC_RP_CLIENT_ID)


@dataclass(frozen=True, slots=True)
class Endpoints:
    authorization: str
    token: str
    jwks: str
    userinfo: str


_discovered: dict[str, tuple[float, Endpoints]] = {}
_discovery_lock = threading.Lock()


def forget_discovery() -> None:
    """Drop cached discovery documents (tests, and a provider that moved its endpoints)."""
    with _discovery_lock:
        _discovered.clear()


def provider_endpoints() -> Endpoints:
    """Explicit MOONCAKE_OIDC_*_ENDPOINT settings, else the issuer's discovery document (cached)."""
    explicit = Endpoints(
        authorization=settings.OIDC_OP_AUTHORIZATION_ENDPOINT,
        token=settings.OIDC_OP_TOKEN_ENDPOINT,
        jwks=settings.OIDC_OP_JWKS_ENDPOINT,
        userinfo=settings.OIDC_OP_USER_ENDPOINT,
    )
    if explicit.authorization and explicit.token and explicit.jwks:
        return explicit
    issuer: str = settings.MOONCAKE_OIDC_ISSUER
    with _discovery_lock:
        cached = _discovered.get(issuer)
        if cached and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
    url = issuer + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        doc = response.json()
    except (requests.RequestException, ValueError) as exc:
        logger.warning("OIDC discovery at %s failed: %s", url, exc)
        raise SsoRefused(
            "The identity provider cannot be reached right now. Please try again later."
        ) from exc
    if not isinstance(doc, dict) or str(doc.get("issuer", "")).rstrip("/") != issuer:
        logger.warning(
            "OIDC discovery at %s names issuer %r", url, doc.get("issuer") if isinstance(doc, dict) else None
        )
        raise SsoRefused("The identity provider's configuration does not match this server's settings.")
    found = Endpoints(
        authorization=explicit.authorization or str(doc.get("authorization_endpoint") or ""),
        token=explicit.token or str(doc.get("token_endpoint") or ""),
        jwks=explicit.jwks or str(doc.get("jwks_uri") or ""),
        userinfo=explicit.userinfo or str(doc.get("userinfo_endpoint") or ""),
    )
    if not (found.authorization and found.token and found.jwks):
        raise SsoRefused("The identity provider's configuration lacks an endpoint this server needs.")
    with _discovery_lock:
        _discovered[issuer] = (time.monotonic(), found)
    return found


def check_id_token_claims(claims: dict[str, Any], *, issuer: str, client_id: str, now: float) -> None:
    """Raise SsoRefused unless the (signature-checked) claims are for us, from our issuer, and current."""
    if str(claims.get("iss", "")).rstrip("/") != issuer:
        raise SsoRefused("Single sign-on failed: the token was issued by a different identity provider.")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if client_id not in audiences:
        raise SsoRefused(
            "Single sign-on failed: the token was issued for a different application (audience)."
        )
    if len(audiences) > 1 and claims.get("azp", client_id) != client_id:
        raise SsoRefused(
            "Single sign-on failed: the token was issued for a different application (audience)."
        )
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        raise SsoRefused("Single sign-on failed: the token has no expiry time.")
    if now > exp + CLOCK_LEEWAY_S:
        raise SsoRefused("Single sign-on failed: the token has expired. Please try again.")
    for name in ("nbf", "iat"):
        value = claims.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > now + CLOCK_LEEWAY_S:
            raise SsoRefused("Single sign-on failed: the token is not valid yet (check the server clocks).")


class SsoBackend(OIDCAuthenticationBackend):
    """The code-flow backend; settings are read per login, so password logins never touch the network."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.UserModel = User

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if request is None or not oidc_enabled() or "code" not in request.GET:
            return None
        try:
            endpoints = provider_endpoints()
            self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token
            self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo
            self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks
            self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
            self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
            self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
            self.OIDC_RP_IDP_SIGN_KEY = None
            return super().authenticate(request, **kwargs)
        except SsoRefused as exc:
            request.sso_error = exc.message  # type: ignore[attr-defined]
        except requests.RequestException as exc:
            logger.warning("OIDC token exchange failed: %s", exc)
            request.sso_error = "The identity provider refused to complete the sign-in. Please try again."  # type: ignore[attr-defined]
        return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        if not token:
            raise SsoRefused("Single sign-on failed: the identity provider sent no ID token.")
        try:
            payload: dict[str, Any] = super().verify_token(token, **kwargs)
        except SuspiciousOperation as exc:
            if "Nonce" in str(exc):
                raise SsoRefused(
                    "Single sign-on failed: the response does not belong to this sign-in (nonce)."
                ) from exc
            logger.warning("OIDC ID token refused: %s", exc)
            raise SsoRefused("Single sign-on failed: the token's signature is not valid.") from exc
        except (JoseError, ValueError, KeyError, TypeError) as exc:
            logger.warning("OIDC ID token unreadable: %s", exc)
            raise SsoRefused("Single sign-on failed: the token's signature is not valid.") from exc
        check_id_token_claims(
            payload,
            issuer=settings.MOONCAKE_OIDC_ISSUER,
            client_id=settings.OIDC_RP_CLIENT_ID,
            now=time.time(),
        )
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims, plus the userinfo endpoint's for the same subject."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT and access_token:
            info = super().get_userinfo(access_token, id_token, payload)
            if isinstance(info, dict) and info.get("sub") == payload.get("sub"):
                claims.update(
                    {k: v for k, v in info.items() if k not in ("iss", "aud", "exp", "iat", "nonce")}
                )
        return claims

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        return sso_user_sign_in(
            issuer=settings.MOONCAKE_OIDC_ISSUER,
            claims=self.get_userinfo(access_token, id_token, payload),
            allowed_domains=list(settings.MOONCAKE_OIDC_ALLOWED_DOMAINS),
            groups_claim=settings.MOONCAKE_OIDC_GROUPS_CLAIM,
        )


# The login page shows (and forgets) the reason inside its form, where people look for login errors.
SSO_ERROR_SESSION_KEY = "mooncake_sso_error"


def _to_login(request: HttpRequest, message: str) -> HttpResponse:
    request.session[SSO_ERROR_SESSION_KEY] = message
    return HttpResponseRedirect(settings.LOGIN_REDIRECT_URL_FAILURE)


class SsoStartView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider's authorization endpoint (with state, nonce and PKCE)."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            endpoints = provider_endpoints()
        except SsoRefused as exc:
            return _to_login(request, exc.message)
        self.OIDC_OP_AUTH_ENDPOINT = endpoints.authorization
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; every refusal ends on the login page with its reason."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise Http404("Single sign-on is not configured.")
        self.user = None
        try:
            return super().get(request)
        except SuspiciousOperation:
            # The state is not one this browser's session started: a stale tab, or a forged callback.
            return _to_login(
                request, "That sign-in was not started from this browser, or has expired. Please try again."
            )

    def login_failure(self) -> HttpResponse:
        request = self.request
        message = getattr(request, "sso_error", None)
        user = getattr(self, "user", None)
        if isinstance(user, User):
            message = login_refusal(user=user) or message
        elif request.GET.get("error"):
            detail = request.GET.get("error_description") or request.GET.get("error")
            message = f"The identity provider did not sign you in: {str(detail)[:200]}"
        elif "code" in request.GET and message is None and "oidc_states" not in request.session:
            message = "That sign-in was not started from this browser, or has expired. Please try again."
        return _to_login(request, message or GENERIC_FAILURE)
