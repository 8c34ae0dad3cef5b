"""Settings shared by every environment; Mooncake's own come from webapp.core.config, Django's from env.

Over 300 lines: every setting the environment gives Django and the web app, each variable with its `#:`
doc-comment (docs/configuration/reference.md is generated from them: tools/settings_env.py).
"""

from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path
from typing import Any

import django_stubs_ext

from webapp.core.config import MooncakeSettings, resolve_settings
from webapp.settings.database import database_from_url
from webapp.settings.env import env_bool, env_int, env_list, env_path, env_str
from webapp.settings.logs import logging_config

# Generic classes such as ModelAdmin[Model] need this at run time, not only under mypy.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# ---- Mooncake's own settings: MOONCAKE_* variables and mooncake.yaml, resolved and validated once
# (webapp/core/config.py, which also keeps where each value came from for `mooncake check`).
MOONCAKE_SETTINGS: MooncakeSettings = resolve_settings()
_server = MOONCAKE_SETTINGS.server

# ---- where data lives: database, Celery's broker folders, converted-model cache, uploaded models
DATA_DIR: Path = _server.data_dir
CACHE_DIR: Path = _server.cache_dir
MODEL_ROOTS: list[Path] = list(_server.model_roots)

# ---- mooncake.yaml's sections: the file MOONCAKE_CONFIG names, else ./mooncake.yaml, else the checkout's
MOONCAKE_CONFIG_PATH: Path | None = _server.config_file
MOONCAKE: dict[str, dict[str, Any]] = MOONCAKE_SETTINGS.yaml

# Start-up tasks and the default model's load, in the background, when the ASGI app starts.
MOONCAKE_AUTOLOAD = _server.autoload
# API key checks on /v1: "required" or "off".
MOONCAKE_API_AUTH: str = _server.api_auth
# Seconds a stopping server lets running generations finish; the console's tuning may override it
# (webapp.core.engine_settings.drain_timeout reads the two).
MOONCAKE_DRAIN_TIMEOUT = _server.drain_timeout
# Memory the model manager may spend on loaded models (0 = no budget).
MOONCAKE_MEMORY_BUDGET_BYTES = _server.memory_budget_bytes
# Seconds an API request may generate before it is cut off (finish_reason "length").
MOONCAKE_API_REQUEST_TIMEOUT = _server.api_request_timeout
# Fallback limits for keys and users with none of their own, and for callers when auth is off (0 = unlimited).
MOONCAKE_API_LIMITS: dict[str, int | None] = {
    "requests_per_minute": _server.api_requests_per_minute or None,
    "tokens_per_minute": _server.api_tokens_per_minute or None,
    "max_concurrent_requests": _server.api_max_concurrent or None,
}
# Prompt text is the users' data: the request log keeps it only when an admin asks for it.
MOONCAKE_API_LOG_PROMPTS = _server.api_log_prompts
# Chat messages a user may send per minute (on top of the user's own limits, which chat shares with the API).
MOONCAKE_CHAT_RATE_LIMIT_PER_MINUTE = _server.chat_rate_limit_per_minute
# Chat sockets one user may hold open in one server process (one per open chat tab).
MOONCAKE_CHAT_MAX_SOCKETS_PER_USER = _server.chat_max_sockets_per_user
# Seconds a dead replica's chat reply keeps reading as running before it shows as interrupted.
MOONCAKE_CHAT_REPLY_LEASE_SECONDS = _server.chat_reply_lease_seconds
# How this replica names itself on the console's Models and Live pages.
MOONCAKE_REPLICA_NAME = _server.replica_name or socket.gethostname()
# When set, /metrics answers only `Authorization: Bearer <token>` (webapp.serving.metrics_view); a secret,
# so it is not part of the config report's settings.
#: When set, /metrics answers only this bearer token (production: refused while unset)
MOONCAKE_METRICS_TOKEN = env_str("MOONCAKE_METRICS_TOKEN", "").strip()
# Whether /metrics is refused while no token is set (production.py); open, it leaves out restricted models.
MOONCAKE_METRICS_TOKEN_REQUIRED = False

SECRET_KEY = env_str("SECRET_KEY", "")  #: Django's secret key; local: one generated into the data folder
DEBUG = env_bool("DEBUG", False)  #: Django's debug pages; `mooncake serve` turns them off on a public bind
ALLOWED_HOSTS: list[str] = env_list("ALLOWED_HOSTS", [])  #: Host names served (local, when empty: localhost)
#: Origins trusted for form posts; production: https:// and each ALLOWED_HOSTS name
CSRF_TRUSTED_ORIGINS: list[str] = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "django_prometheus",
    "axes",
    "webapp.core",
    "webapp.serving",
    "webapp.accounts",
    "webapp.chat",
    "webapp.api",
    "webapp.console",
    "webapp.preferences",
    "webapp.organize",
    "webapp.documents",
]

MIDDLEWARE = [
    # First: every later middleware's log lines already carry the request id.
    "webapp.core.request_id.request_id_middleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "webapp.core.body_limits.body_limit_middleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # Before CommonMiddleware's Host check: Prometheus scrapes each replica by its IP.
    "webapp.serving.metrics_host.metrics_host_middleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "webapp.core.middleware.first_run_setup_middleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    # Turns a throttled login (webapp.accounts.throttle) into the login page's lockout message.
    "axes.middleware.AxesMiddleware",
    "webapp.core.csp.csp_middleware",
]
# API paths (webapp.core.api_asgi): bearer keys instead of sessions, so no session, auth, CSRF or messages;
# the rest as above, on the event loop.
API_MIDDLEWARE = [
    "webapp.core.request_id.request_id_middleware",
    "webapp.core.loop_middleware.PrometheusBefore",
    "webapp.core.loop_middleware.Security",
    "webapp.core.body_limits.body_limit_middleware",
    "webapp.core.loop_middleware.Common",
    "webapp.core.loop_middleware.XFrameOptions",
    "webapp.core.loop_middleware.PrometheusAfter",
    "webapp.core.csp.csp_middleware",  # /v1/docs is HTML too: the site's policy (JSON and SSE get none)
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.core.context_processors.mooncake",
            ],
        },
    },
]

DATABASES = {
    #: postgres://user:pass@host:port/name or sqlite:path; empty: SQLite in the data folder
    "default": database_from_url(env_str("DATABASE_URL", ""), default_sqlite=DATA_DIR / "mooncake.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "core:login"
# The throttle first (it refuses locked accounts and addresses), then passwords, then single sign-on.
AUTHENTICATION_BACKENDS = [
    "webapp.accounts.throttle.ThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
    "webapp.accounts.oidc.SsoBackend",
]

# ---- Login throttling (django-axes, webapp/accounts/throttle.py): a username that fails this many times
# from one address is locked there for the cool-off time, and an address that fails the (much higher)
# address limit over any usernames is locked whole; admins see and lift locks on the Sign-ups & locks page.
AXES_FAILURE_LIMIT = env_int("MOONCAKE_LOGIN_FAILURE_LIMIT", 5)  #: Failures locking a username at an address
#: Failed logins, any usernames, that lock an address
MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT", 50)
#: Minutes a lock lasts
AXES_COOLOFF_TIME = dt.timedelta(minutes=env_int("MOONCAKE_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "webapp.accounts.throttle.PairAndAddressHandler"
# Off: axes would wipe every failure from the address, so logging in to one's own account would reset the
# count against someone else's; failures age out after the cool-off instead.
AXES_RESET_ON_SUCCESS = False
AXES_LOCKOUT_CALLABLE = "webapp.accounts.views.locked_out"
AXES_CLIENT_IP_CALLABLE = "webapp.accounts.throttle.client_ip"
#: Reverse proxies in front of Daphne that append to X-Forwarded-For (the shipped nginx is one): the
#: client's address is that many entries from the right; 0 trusts no header
MOONCAKE_PROXY_COUNT = env_int("MOONCAKE_PROXY_COUNT", 0)

# ---- Single sign-on with OpenID Connect (webapp/accounts/oidc.py): on when issuer and client id are set.
# Endpoints come from the issuer's /.well-known/openid-configuration unless given explicitly.
#: The OpenID Connect issuer; single sign-on is on when it and the client id are set
MOONCAKE_OIDC_ISSUER = env_str("MOONCAKE_OIDC_ISSUER", "").strip().rstrip("/")
OIDC_RP_CLIENT_ID = env_str("MOONCAKE_OIDC_CLIENT_ID", "").strip()  #: This app's client id at the issuer
OIDC_RP_CLIENT_SECRET = env_str("MOONCAKE_OIDC_CLIENT_SECRET", "")  #: This app's client secret at the issuer
#: Email domains whose people may sign in with SSO (empty: any); sign-up's own list decides approval
MOONCAKE_OIDC_ALLOWED_DOMAINS: list[str] = [d.lower() for d in env_list("MOONCAKE_OIDC_ALLOWED_DOMAINS", [])]
#: The ID token / userinfo claim listing the user's groups (empty: groups are not synchronised)
MOONCAKE_OIDC_GROUPS_CLAIM = env_str("MOONCAKE_OIDC_GROUPS_CLAIM", "").strip()
#: What the login page calls the SSO provider
MOONCAKE_OIDC_PROVIDER_NAME = env_str("MOONCAKE_OIDC_PROVIDER_NAME", "single sign-on").strip()
#: Empty: from the issuer's discovery document
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("MOONCAKE_OIDC_AUTHORIZATION_ENDPOINT", "").strip()
#: Empty: from the issuer's discovery document
OIDC_OP_TOKEN_ENDPOINT = env_str("MOONCAKE_OIDC_TOKEN_ENDPOINT", "").strip()
#: Empty: from the issuer's discovery document
OIDC_OP_JWKS_ENDPOINT = env_str("MOONCAKE_OIDC_JWKS_URI", "").strip()
#: Empty: from the issuer's discovery document
OIDC_OP_USER_ENDPOINT = env_str("MOONCAKE_OIDC_USERINFO_ENDPOINT", "").strip()
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = "openid email profile"
OIDC_USE_NONCE = True
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATION_CALLBACK_URL = "accounts:oidc-callback"
LOGIN_REDIRECT_URL_FAILURE = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "core:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")  #: Django's time zone
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env_path("STATIC_ROOT", DATA_DIR / "staticfiles")  #: Where collectstatic puts static files

# ---- Channels: in-memory for one process; Redis when replicas share the layer
REDIS_URL = env_str("REDIS_URL", "")  #: The channel layer replicas share; empty: in memory, one process
CHANNEL_LAYERS: dict[str, dict[str, Any]] = (
    {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
    if REDIS_URL
    else {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
)

# ---- Celery: kombu's filesystem transport needs no server; Redis when CELERY_BROKER_URL says so
CELERY_DIR = DATA_DIR / "celery"
#: Celery's broker; filesystem:// needs no server
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = (
    {
        # One folder for both directions: producer and worker live on the same machine.
        "data_folder_in": str(CELERY_DIR / "queue"),
        "data_folder_out": str(CELERY_DIR / "queue"),
        "processed_folder": str(CELERY_DIR / "processed"),
        # Without this kombu writes its exchange files into ./control of whatever directory it runs in.
        "control_folder": str(CELERY_DIR / "control"),
        "store_processed": False,
    }
    if CELERY_BROKER_URL.startswith("filesystem")
    else {}
)
#: Where Celery keeps task results
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", f"file://{CELERY_DIR / 'results'}")
# kombu's filesystem transport and Celery's file result backend refuse folders that do not exist.
for _folder in (DATA_DIR, *(CELERY_DIR / name for name in ("queue", "processed", "results", "control"))):
    _folder.mkdir(parents=True, exist_ok=True)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_TASK_ALWAYS_EAGER = False
CELERY_WORKER_CONCURRENCY = env_int("CELERY_WORKER_CONCURRENCY", 2)  #: Jobs one Celery worker runs at once
# Workers never load models (CUDA and forked pools do not mix); threads suit their I/O jobs.
CELERY_WORKER_POOL = env_str("CELERY_WORKER_POOL", "threads")  #: The Celery worker's pool
# Periodic jobs (the worker runs beat: `mooncake serve` and the compose worker start it with --beat).
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "prune-request-log": {"task": "api.prune_request_log", "schedule": 3600.0},
    "prune-responses": {"task": "api.prune_responses", "schedule": 3600.0},
    # Documents a dead worker left being read are marked failed (webapp.documents.indexing).
    "recover-documents": {"task": "documents.recover", "schedule": 30.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(CELERY_DIR / "beat-schedule")
# Days of request-log detail kept; older rows are deleted hourly. Their tokens stay in the daily usage
# (written as each request finishes), which the usage page and quotas read.
MOONCAKE_REQUEST_LOG_DAYS = env_int("MOONCAKE_REQUEST_LOG_DAYS", 30)  #: Days of request-log detail kept
MOONCAKE_RESPONSES_DAYS = env_int("MOONCAKE_RESPONSES_DAYS", 30)  #: Days stored /v1/responses are kept
#: Tokens (prompt + generated) a user may use per UTC day unless the console sets their own; 0: no quota
MOONCAKE_DAILY_TOKEN_QUOTA = env_int("MOONCAKE_DAILY_TOKEN_QUOTA", 0)

# ---- A GGUF uploaded on the console's models page (webapp.console.uploads): its largest size in bytes.
#: The largest GGUF the console's models page takes, in bytes
MOONCAKE_MODEL_UPLOAD_MAX_BYTES = env_int("MOONCAKE_MODEL_UPLOAD_MAX_BYTES", 64 * 1024**3)

# ---- Documents in chats (webapp.documents): what one upload may hold, and how much of a prompt they fill.
# Bytes stay under MOONCAKE_MAX_REQUEST_BYTES (webapp.core.body_limits), so the upload view answers them.
#: The largest document upload in bytes
MOONCAKE_DOCUMENTS_MAX_BYTES = env_int("MOONCAKE_DOCUMENTS_MAX_BYTES", 5 * 1024 * 1024)
MOONCAKE_DOCUMENTS_MAX_PAGES = env_int("MOONCAKE_DOCUMENTS_MAX_PAGES", 300)  #: Pages a document may have
#: The most characters of text a document may hold
MOONCAKE_DOCUMENTS_MAX_CHARS = env_int("MOONCAKE_DOCUMENTS_MAX_CHARS", 1_000_000)
MOONCAKE_DOCUMENTS_PER_CHAT = env_int("MOONCAKE_DOCUMENTS_PER_CHAT", 20)  #: Documents one chat may hold
MOONCAKE_DOCUMENTS_CHUNK_CHARS = env_int("MOONCAKE_DOCUMENTS_CHUNK_CHARS", 1200)  #: Characters per passage
#: The most prompt tokens documents may take in one reply (less when the model's context is smaller)
MOONCAKE_DOCUMENTS_CONTEXT_TOKENS = env_int("MOONCAKE_DOCUMENTS_CONTEXT_TOKENS", 6000)
#: The embedding model (task: embed) that ranks passages by meaning beside full-text search: "" picks the
#: first one mooncake.yaml lists (the bundled one first), "off" ranks by full-text search alone
MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = env_str("MOONCAKE_DOCUMENTS_EMBEDDING_MODEL", "")
# Reading a document (webapp.documents.isolation) runs in a child process, killed past these bounds; a
# compressed file is refused before parsing.
#: Seconds reading one document may take (its process is killed past them)
MOONCAKE_DOCUMENTS_EXTRACT_SECONDS = env_int("MOONCAKE_DOCUMENTS_EXTRACT_SECONDS", 60)
#: Memory (MB, address space) the process reading one document may take
MOONCAKE_DOCUMENTS_EXTRACT_MEMORY_MB = env_int("MOONCAKE_DOCUMENTS_EXTRACT_MEMORY_MB", 512)
#: MB a compressed file may unpack to, all parts together
MOONCAKE_DOCUMENTS_MAX_UNPACKED_MB = env_int("MOONCAKE_DOCUMENTS_MAX_UNPACKED_MB", 50)
#: Times its size one part of a compressed file may unpack to; 0: no bound
MOONCAKE_DOCUMENTS_MAX_UNPACK_RATIO = env_int("MOONCAKE_DOCUMENTS_MAX_UNPACK_RATIO", 100)
#: One user's documents read at once, the rest queued; 0: no limit
MOONCAKE_DOCUMENTS_MAX_PROCESSING_PER_USER = env_int("MOONCAKE_DOCUMENTS_MAX_PROCESSING_PER_USER", 1)
#: A user's documents waiting or being read before an upload is refused (429); 0: no limit
MOONCAKE_DOCUMENTS_MAX_QUEUED_PER_USER = env_int("MOONCAKE_DOCUMENTS_MAX_QUEUED_PER_USER", 40)

PROMETHEUS_EXPORT_MIGRATIONS = False

# One line per record, plain or JSON (LOG_FORMAT=json), each with its request's id (webapp.settings.logs).
LOGGING = logging_config(
    log_format=env_str("LOG_FORMAT", "plain"),  #: plain, or json: one JSON object per line
    level=env_str("LOG_LEVEL", "INFO"),  #: The root logger's level
)
