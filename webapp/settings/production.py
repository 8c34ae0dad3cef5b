"""Settings for behind nginx with TLS: secrets from the environment, secure cookies, HSTS."""

from __future__ import annotations

from webapp.core.config import PRODUCTION_DEFAULTS, api_limits, resolve_settings
from webapp.settings.base import *  # noqa: F403
from webapp.settings.env import env_bool, env_int, env_list, env_required

# Fallback API limits are on by default here (README, "Default limits"); the variables still override.
MOONCAKE_SETTINGS = resolve_settings(defaults=PRODUCTION_DEFAULTS)
MOONCAKE_API_LIMITS = api_limits(MOONCAKE_SETTINGS.server)

DEBUG = False
SECRET_KEY = env_required("SECRET_KEY")
ALLOWED_HOSTS = [h for h in env_required("ALLOWED_HOSTS").split(",") if h.strip()]

# nginx terminates TLS and says so in X-Forwarded-Proto. SECURE_SSL_REDIRECT says whether TLS is in front:
# 0 is a plain-HTTP trial, which also needs cookies without the Secure flag (a browser keeps a Secure
# cookie from plain HTTP only on localhost, so the login's CSRF check would fail anywhere else).
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
#: Whether TLS is in front; 0: a plain-HTTP trial (cookies without Secure)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
# /metrics names every model, restricted ones too: here it answers only MOONCAKE_METRICS_TOKEN's bearer.
MOONCAKE_METRICS_TOKEN_REQUIRED = True
# Probes and Prometheus scrape over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^version$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)  #: HSTS max-age
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)  #: HSTS includeSubDomains
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)  #: HSTS preload
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
#: The session cookie's Secure flag
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", SECURE_SSL_REDIRECT)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", SECURE_SSL_REDIRECT)  #: The CSRF cookie's Secure flag
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# nginx appends the client's address to X-Forwarded-For: the login throttle counts per client, not per nginx.
MOONCAKE_PROXY_COUNT = env_int("MOONCAKE_PROXY_COUNT", 1)
# Sign-up, approval and SSO (README, "Accounts"): MOONCAKE_OIDC_ISSUER, _CLIENT_ID, _CLIENT_SECRET,
# _ALLOWED_DOMAINS, _GROUPS_CLAIM (and explicit endpoints) are read in base; the secret only from the
# environment. MOONCAKE_LOGIN_FAILURE_LIMIT / _LOCKOUT_MINUTES tune the login throttle.
CSRF_TRUSTED_ORIGINS = env_list(
    "CSRF_TRUSTED_ORIGINS", [f"https://{h}" for h in ALLOWED_HOSTS if "*" not in h]
)
