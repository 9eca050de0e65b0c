"""Hierarch settings: one file, driven by the environment.

Every setting a deployment changes is read from an environment variable through the small
helpers below, which fail loudly on a value they cannot read. The defaults are the embedded
default of `make run`: SQLite in `var/`, in-memory channel layer, the in-process executor.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("HIERARCH_VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}")
    return value


def env_rate(name: str, default: str) -> str:
    """A DRF throttle rate: requests per second, minute, hour or day ("600/minute")."""
    value = env_str(name, default).strip()
    number, _, period = value.partition("/")
    if not (number.isdecimal() and period[:1] in {"s", "m", "h", "d"}):
        raise ImproperlyConfigured(f"{name}={value!r} is not a rate; write it as 600/minute")
    return value


DEBUG = env_bool("DEBUG", False)

# SECRET_KEY, else the embedded default's key that `make run` keeps in var/secret_key, so
# `manage.py` commands beside `make run` sign, hash and decrypt as its server does (API
# tokens, the credential vault); else, with DEBUG=1 only, a development key.
SECRET_KEY = env_str("SECRET_KEY")
_KEY_FILE = VAR_DIR / "secret_key"
if not SECRET_KEY and _KEY_FILE.is_file():
    SECRET_KEY = _KEY_FILE.read_text().strip()
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. Set it in the environment (50+ random characters), "
            "run `make run` once (it keeps one in var/secret_key), "
            "or set DEBUG=1 for a local development key."
        )
    SECRET_KEY = "dev-only-insecure-key-" + "x" * 40  # noqa: S105 - DEBUG only

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "guardian",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from static, no CDN
    "django_htmx",
    "template_partials",
    "governance",
    "entities",
    "tools",
    "runs",
    "approvals",
    "dashboard",
    "designer",
]
# daphne's app only makes `manage.py runserver` serve ASGI (websockets included), and it
# imports Twisted's server (about 40 MB) into every process that loads the settings: a Celery
# worker, the shell. `make run`, the daphne command, serves config.asgi without it.
if sys.argv[1:2] == ["runserver"]:
    INSTALLED_APPS.insert(0, "daphne")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"

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
                "approvals.context_processors.inbox",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

# Database: DATABASE_URL (postgres://… or sqlite:///…); the embedded default is a SQLite file
# in WAL mode. IMMEDIATE transactions make concurrent writers queue instead of failing.
DATABASE_URL = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'hierarch.sqlite3'}"
try:
    _db = dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
        # A kept connection (SQLite: DB_CONN_MAX_AGE, an inline executor thread's) is checked
        # before its first use in a request or a step. One the database dropped while it sat
        # idle is replaced instead of failing the work. (PostgreSQL: see the pool below.)
        conn_health_checks=env_bool("DB_CONN_HEALTH_CHECKS", True),
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL cannot be read: {exc}") from None
if _db["ENGINE"] == "django.db.backends.sqlite3":
    _db["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    if _db["NAME"] != ":memory:":
        Path(_db["NAME"]).parent.mkdir(parents=True, exist_ok=True)
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # No JIT compilation: it starts when the planner's estimate passes jit_above_cost, which
    # stale statistics make happen for millisecond queries, and then costs ~10 ms a query
    # (seen on the engine's child lookup). HIERARCH_DB_JIT=1 leaves the server's setting.
    _options = _db.setdefault("OPTIONS", {})
    if not env_bool("HIERARCH_DB_JIT", False):
        _options["options"] = f"{_options.get('options', '')} -c jit=off".strip()
    # Every process takes its connections from a pool (Django's, on psycopg_pool) of at most
    # DB_POOL_MAX_SIZE, however many threads it runs: a thread holds one only while it talks
    # to the database, never while it waits on a model or the network (runs/executors.py).
    # The pool keeps them open, so Django's own keeping (DB_CONN_MAX_AGE) must be 0.
    if _db["CONN_MAX_AGE"] != 0:
        raise ImproperlyConfigured(
            "DB_CONN_MAX_AGE must be 0 with PostgreSQL: its connections are kept by the pool "
            "(DB_POOL_MAX_SIZE, DB_POOL_MIN_SIZE)"
        )
    _pool_min, _pool_max = env_int("DB_POOL_MIN_SIZE", 2), env_int("DB_POOL_MAX_SIZE", 10)
    if _pool_max < 1 or not 0 <= _pool_min <= _pool_max:
        raise ImproperlyConfigured("DB_POOL_MAX_SIZE is 1 or more, DB_POOL_MIN_SIZE 0 to it")
    # With checks on, the pool checks every connection it hands out: an empty query, a round
    # trip each time a thread takes one, which is after every model call (a thread hands its
    # connection back before it waits: runs/executors.py) and was a quarter of the engine's
    # round trips per node. Off by default: a thread checks the connection it takes after a
    # wait outside the database of a second or more instead (`check_after_waiting`), where a
    # dropped connection would cost a model call's answer; a connection dropped while idle
    # fails the query that takes it (the pool then replaces it) and the run goes on from the
    # sweeper. DB_CONN_HEALTH_CHECKS=1 has the pool check every connection again.
    _db["CONN_HEALTH_CHECKS"] = env_bool("DB_CONN_HEALTH_CHECKS", False)
    _options["pool"] = {
        "min_size": _pool_min,
        "max_size": _pool_max,
        # How long a thread waits for a free connection before its work fails (a step's
        # run then goes on from the sweeper).
        "timeout": env_float("DB_POOL_TIMEOUT", 30.0),
    }
    # Behind a pooler in transaction mode (PgBouncer) a server-side cursor (QuerySet.iterator,
    # the audit chain's verification) cannot outlive its transaction: read in chunks instead.
    _db["DISABLE_SERVER_SIDE_CURSORS"] = env_bool("DB_DISABLE_SERVER_SIDE_CURSORS", False)
    # psycopg prepares a statement bound on the server (the engine's per-step statements,
    # runs/sql.py; the ORM binds on the client and never prepares) once a connection ran it
    # this many times. Django's default, None, prepares nothing: for a connection pooler in
    # transaction mode that cannot keep prepared statements (HIERARCH_PREPARE_STATEMENTS=0).
    if env_bool("HIERARCH_PREPARE_STATEMENTS", True):
        _options["prepare_threshold"] = 5
else:
    raise ImproperlyConfigured(f"DATABASE_URL uses {_db['ENGINE']}; use postgres:// or sqlite://")
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis: the channel layer and the cache when REDIS_URL is set; in-memory otherwise.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "hierarch",
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Live pages across processes without Redis (runs/relay.py): the in-memory channel layer only
# reaches the sockets of the process that sends, so a run started by `manage.py run_entity` or
# a request decided from another process would never show live in the server's pages. With
# it on, the server process reads what other processes wrote (the trace events the runs write
# anyway, and a small table of inbox broadcasts) every POLL_SECONDS and hands it to its own
# layer. Off with Redis: the Redis layer already reaches every process.
HIERARCH_LIVE_RELAY = {
    "ENABLED": not REDIS_URL,
    "POLL_SECONDS": env_float("HIERARCH_LIVE_RELAY_SECONDS", 0.25),
    # How long a broadcast row is kept for the server to read; older ones are deleted.
    "KEEP_SECONDS": 60,
}

# Execution: `inline` runs the engine in a thread pool inside the server process (the embedded
# default); `celery` hands each step to Celery workers.
HIERARCH_EXECUTOR = env_choice("HIERARCH_EXECUTOR", "inline", ("inline", "celery"))

# The engine: how long a worker's lease on a run lasts before a sweeper may hand the run to
# another worker (longer than any one step), how often the sweeper looks for runs nobody moves
# (Celery beat, or a thread of the server with the inline executor), and how many threads the
# inline executor runs.
HIERARCH_ENGINE = {
    "LEASE_SECONDS": env_int("HIERARCH_LEASE_SECONDS", 15),
    "SWEEP_SECONDS": env_int("HIERARCH_SWEEP_SECONDS", 5),
    # The most passes any loop makes, whatever its max_iterations (null included) says.
    "MAX_PASSES": env_int("HIERARCH_MAX_PASSES", 25),
    # The most turns a REACT entity's reasoning loop takes in one step (a turn: a model call
    # and the tools it calls) before the step fails LIMIT_EXCEEDED.
    "MAX_TOOL_TURNS": env_int("HIERARCH_MAX_TOOL_TURNS", 20),
    # The inline executor's threads: steps in flight in the server process. A step spends
    # most of its time waiting on a model, holding no database connection (PostgreSQL) or
    # queueing for SQLite's one writer only while it writes.
    "INLINE_WORKERS": env_int("HIERARCH_INLINE_WORKERS", 32),
    # A worker goes on itself with the first child it starts and the parent it wakes (their
    # leases taken in the same commits, no hint and no claim) for up to this long, then
    # hands the next one to any worker. 0 turns it off: every run goes through the queue.
    "HANDOFF_SECONDS": env_float("HIERARCH_HANDOFF_SECONDS", 1.0),
    # A Celery worker hands the other runs a step starts or wakes to its own free threads
    # (fewer steps in flight than its concurrency) before the broker (runs/executors.py).
    # 0: every hint through the broker.
    "WORKER_OWN_HINTS": env_bool("HIERARCH_WORKER_OWN_HINTS", True),
    # PostgreSQL: each write of a step sends its statements together (pipeline mode) and
    # waits once for all their answers, not once each.
    "PIPELINE": env_bool("HIERARCH_PIPELINE", True),
    # SQLite (no pool): an inline executor thread keeps its database connection between steps
    # for up to this many seconds (opening one costs its PRAGMAs); 0 closes it after each
    # step. PostgreSQL's connections are kept by the pool (DB_POOL_MAX_SIZE) instead.
    "WORKER_CONN_MAX_AGE": env_int("HIERARCH_WORKER_CONN_MAX_AGE", 300),
}
if HIERARCH_ENGINE["WORKER_CONN_MAX_AGE"] < 0:
    raise ImproperlyConfigured("HIERARCH_WORKER_CONN_MAX_AGE is in seconds: 0 or more")

# Celery: a message is only a hint to look at a run, the database is the truth. Acknowledge
# after the task ran and give a message back when its worker dies, one message per free slot
# at a time, JSON only. Redis redelivers an unacknowledged message after the visibility
# timeout, so it is longer than any step; the sweeper, not that redelivery, recovers a dead
# worker's run.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL") or REDIS_URL or "memory://"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A worker (`celery -A config worker`, config/celery.py WORKER_COMMAND) runs its steps in a
# pool of threads, HIERARCH_WORKER_CONCURRENCY of them: a step spends most of its time
# waiting on a model, which releases the GIL and holds no database connection, so one
# process keeps that many model calls in flight on one set of imports (litellm's 200 MB).
CELERY_WORKER_POOL = "threads"
CELERY_WORKER_CONCURRENCY = env_int("HIERARCH_WORKER_CONCURRENCY", 128)
if CELERY_WORKER_CONCURRENCY < 1:
    raise ImproperlyConfigured("HIERARCH_WORKER_CONCURRENCY is 1 or more")
# Celery's Django fix-up closes each thread's connections around every task: with the pool
# that hands them back to it (no new connection per task); without (SQLite) it closes them.
CELERY_DB_REUSE_MAX = None
# How often alerts (governance/alerts.py) are evaluated: by beat, or by the inline sweeper.
HIERARCH_ALERTS_SECONDS = env_int("HIERARCH_ALERTS_SECONDS", 60)

# Human in the loop: how often approval timeouts are looked for (a thread in each Celery
# worker's main process, or in the server with the inline executor), and the base URL the
# notification messages link to.
HIERARCH_HITL = {
    "TIMER_SECONDS": env_float("HIERARCH_HITL_TIMER_SECONDS", 1.0),
}
# The console's address, else the one `make run` keeps in var/base_url (its HOST and PORT), so
# the links `manage.py` commands beside it print lead to its server, whatever its port.
HIERARCH_BASE_URL = env_str("HIERARCH_BASE_URL")
_BASE_URL_FILE = VAR_DIR / "base_url"
if not HIERARCH_BASE_URL and _BASE_URL_FILE.is_file():
    HIERARCH_BASE_URL = _BASE_URL_FILE.read_text().strip()
HIERARCH_BASE_URL = HIERARCH_BASE_URL or "http://127.0.0.1:8000"

# /metrics (Prometheus): a scraper sends this as a bearer token; unset, only a signed-in
# staff member or superuser may read it.
HIERARCH_METRICS_TOKEN = env_str("HIERARCH_METRICS_TOKEN")
if HIERARCH_METRICS_TOKEN and len(HIERARCH_METRICS_TOKEN) < 32:
    raise ImproperlyConfigured("HIERARCH_METRICS_TOKEN is a secret: 32 characters or more")

CELERY_BEAT_SCHEDULE = {
    "evaluate-alerts": {
        "task": "runs.tasks.evaluate_alerts_task",
        "schedule": float(HIERARCH_ALERTS_SECONDS),
        "options": {"expires": float(HIERARCH_ALERTS_SECONDS)},
    },
    "sweep-runs": {
        "task": "runs.tasks.sweep_runs",
        "schedule": float(HIERARCH_ENGINE["SWEEP_SECONDS"]),
        # A sweep nobody picked up before the next one is worthless: drop it.
        "options": {"expires": float(HIERARCH_ENGINE["SWEEP_SECONDS"])},
    },
}

AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row; anonymous visitors see nothing
GUARDIAN_MONKEY_PATCH_USER = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise warns about a missing root
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG

LOGIN_URL = "admin:login"
LOGIN_REDIRECT_URL = "/admin/"


# The API under /api/v1/ (config/api.py; the error object, pagination and strict bodies in
# config/api_contract.py). Authentication is a per-user API token (`Authorization: Bearer
# hrc_…`, governance/api_auth.py; made on /account/tokens/ or with `manage.py
# create_api_token`), else the browser session; the token class is first in
# DEFAULT_AUTHENTICATION_CLASSES, so a 401 offers its `Bearer` challenge. JSON in and out
# only. Each signed-in user has their own throttle, generous by default: it stops a runaway
# script, not a person.
HIERARCH_API = {
    "USER_RATE": env_rate("HIERARCH_API_USER_RATE", "1200/minute"),
    "ANON_RATE": env_rate("HIERARCH_API_ANON_RATE", "120/minute"),
    "PAGE_SIZE": env_int("HIERARCH_API_PAGE_SIZE", 50),
    "MAX_PAGE_SIZE": env_int("HIERARCH_API_MAX_PAGE_SIZE", 500),
    # Runs started per workspace (execute and re-run), whoever starts them: one noisy client
    # cannot take a shared workspace's capacity.
    "WORKSPACE_RATE": env_rate("HIERARCH_API_WORKSPACE_RATE", "3000/minute"),
    # Days an API token lives when its creator gives no expiry (0: no expiry).
    "TOKEN_DAYS": env_int("HIERARCH_API_TOKEN_DAYS", 90),
    # How long `execute` with `"async": false` waits for the run's end before answering 202.
    "SYNC_WAIT_SECONDS": env_float("HIERARCH_API_SYNC_WAIT_SECONDS", 30.0),
    # How long an Idempotency-Key is remembered.
    "IDEMPOTENCY_HOURS": env_int("HIERARCH_API_IDEMPOTENCY_HOURS", 24),
}

# Webhooks: the POST a run's end sends to its `webhook_url` (runs/webhooks.py), signed with
# HMAC-SHA256 over the body with the workspace's webhook secret. A URL that resolves to a
# private, loopback or link-local address is refused unless ALLOW_PRIVATE is set (a closed
# network where the receivers live next door, and the tests).
HIERARCH_WEBHOOKS = {
    "ALLOW_PRIVATE": env_bool("HIERARCH_WEBHOOKS_ALLOW_PRIVATE", False),
    "TIMEOUT_SECONDS": env_float("HIERARCH_WEBHOOKS_TIMEOUT_SECONDS", 10.0),
    "MAX_ATTEMPTS": env_int("HIERARCH_WEBHOOKS_MAX_ATTEMPTS", 6),
    "BACKOFF_SECONDS": env_float("HIERARCH_WEBHOOKS_BACKOFF_SECONDS", 10.0),
}


# Tracing: each trace exported as OpenTelemetry spans over OTLP/HTTP once its root run ends
# (runs/tracing.py), so Langfuse, Jaeger or Grafana Tempo show it. OpenTelemetry's own names:
# nothing is exported without an endpoint; a base endpoint gets the /v1/traces path; the
# sampling rate is the share of traces exported, decided by the trace id alone. Headers (an
# Authorization for Langfuse) come from OTEL_EXPORTER_OTLP_TRACES_HEADERS or
# OTEL_EXPORTER_OTLP_HEADERS, read by the exporter itself.
def _otlp_traces_endpoint() -> str:
    endpoint = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").strip()
    if endpoint:
        return endpoint
    base = env_str("OTEL_EXPORTER_OTLP_ENDPOINT").strip()
    return f"{base.rstrip('/')}/v1/traces" if base else ""


def _sampling_rate(name: str) -> float:
    rate = env_float(name, 1.0)
    if not 0.0 <= rate <= 1.0:
        raise ImproperlyConfigured(f"{name}={rate!r} is not a rate between 0 and 1")
    return rate


HIERARCH_TRACING = {
    "ENDPOINT": _otlp_traces_endpoint(),
    "SAMPLING_RATE": _sampling_rate("OTEL_TRACES_SAMPLER_ARG"),
    "SERVICE_NAME": env_str("OTEL_SERVICE_NAME", "hierarch") or "hierarch",
    "TIMEOUT_SECONDS": env_float("HIERARCH_TRACING_TIMEOUT_SECONDS", 10.0),
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "governance.api_auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["config.parsers.JSONBodyParser"],
    "DEFAULT_PAGINATION_CLASS": "config.api_contract.PageNumberPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.UserRateThrottle",
        "rest_framework.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": HIERARCH_API["USER_RATE"],
        "anon": HIERARCH_API["ANON_RATE"],
    },
    "EXCEPTION_HANDLER": "config.api_contract.exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Hierarch API",
    "DESCRIPTION": (
        "Runs, approvals, entities and tools of the workspaces you belong to. Authenticate "
        "with `Authorization: Bearer TOKEN` (create a token on the console's API tokens page, "
        "/account/tokens/) or the console's session. Every error is "
        '`{"error": {"code", "message", "details"}, "retryable"}`; an object of '
        "a workspace you cannot see is a 404."
    ),
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": r"/api/v1/",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One name per set of choices, whichever field uses it.
    "ENUM_NAME_OVERRIDES": {
        "ApprovalStatusEnum": "approvals.models.ApprovalStatus",
        "DecisionEnum": "approvals.models.Decision",
        "RiskEnum": "approvals.models.Risk",
        "TriggerEnum": "approvals.models.Trigger",
        "EntityTypeEnum": "entities.models.EntityType",
        "EntityStatusEnum": "entities.models.EntityStatus",
    },
}

# Security: safe defaults when DEBUG is off (`manage.py check --deploy` reports nothing);
# a deployment behind a TLS-terminating proxy keeps them and sets SECURE_PROXY_SSL_HEADER.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Uploads and imports: an entity import file larger than this is refused before it is parsed.
HIERARCH_IMPORT_MAX_BYTES = env_int("HIERARCH_IMPORT_MAX_BYTES", 5 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = HIERARCH_IMPORT_MAX_BYTES + 1024 * 1024

# Bad input (issue 16, item 7). Every API request body is at most HIERARCH_IMPORT_MAX_BYTES
# (413 over it), and JSON from a client or a form (API bodies, the forms' JSON fields, entity
# definitions) is nested at most HIERARCH_JSON_MAX_DEPTH levels (JSONLogic expressions, which
# may also arrive as text, at most runs.engine.jsonlogic.MAX_DEPTH). Deeper is refused with a
# 400 naming where (config/json_input.py), never a RecursionError.
HIERARCH_JSON_MAX_DEPTH = env_int("HIERARCH_JSON_MAX_DEPTH", 64)
if not 8 <= HIERARCH_JSON_MAX_DEPTH <= 200:
    raise ImproperlyConfigured("HIERARCH_JSON_MAX_DEPTH is a number of levels from 8 to 200")

# Models: the built-in offline model's nominal prices and artificial latency (so budgets and
# dashboards behave as with a paid model), and the timeout of every model call.
HIERARCH_OFFLINE_MODEL = {
    "PRICE_PER_1K_INPUT_TOKENS": float(env_str("HIERARCH_OFFLINE_PRICE_PER_1K_INPUT", "0.0005")),
    "PRICE_PER_1K_OUTPUT_TOKENS": float(env_str("HIERARCH_OFFLINE_PRICE_PER_1K_OUTPUT", "0.0015")),
    "LATENCY_MS": env_int("HIERARCH_OFFLINE_LATENCY_MS", 0),
}
HIERARCH_MODEL_TIMEOUT_S = env_int("HIERARCH_MODEL_TIMEOUT_S", 60)

# Tools: the hosts the http_request tool may call (exact names or *.domain); private and
# loopback addresses are refused unless allowed.
HIERARCH_HTTP_ALLOWED_HOSTS = env_list("HIERARCH_HTTP_ALLOWED_HOSTS", [])
HIERARCH_HTTP_ALLOW_PRIVATE = env_bool("HIERARCH_HTTP_ALLOW_PRIVATE", False)

# Tool rate limits (calls_per_minute, calls_per_hour) are counted where every worker sees them:
# `redis` (REDIS_URL), `database` (a counter row per tool and window), or `auto`: Redis when
# REDIS_URL is set, else the database.
HIERARCH_RATE_LIMIT_BACKEND = env_choice(
    "HIERARCH_RATE_LIMIT_BACKEND", "auto", ("auto", "redis", "database")
)
if HIERARCH_RATE_LIMIT_BACKEND == "redis" and not REDIS_URL:
    raise ImproperlyConfigured("HIERARCH_RATE_LIMIT_BACKEND=redis needs REDIS_URL to be set")

# The credential vault: Fernet keys (comma-separated, newest first). The newest encrypts, every
# key decrypts, `manage.py rotate_vault_key` re-encrypts everything with the newest. Empty: one
# key derived from SECRET_KEY (governance/vault.py), so the embedded default needs no setup.
HIERARCH_VAULT_KEYS = env_list("HIERARCH_VAULT_KEYS", [])

# --- The audit log's key and kept heads (issue 16, item 5; governance/audit.py) ---
# KEYS: HMAC keys (comma-separated, newest first, 32+ characters each). The newest signs new
# records, every one verifies; add a new key in front and keep the old ones to rotate. Empty:
# one key derived from SECRET_KEY (and SECRET_KEY_FALLBACKS, which verify). Keep it out of
# the database: whoever holds it can forge a chain that verifies.
# HEAD_FILE: a file the periodic export appends each moved chain head to (JSON lines, for
# `verify_audit --heads-file`); empty: the heads go to the log (logger hierarch.audit) only.
# EXPORT_SECONDS: how often (Celery beat, or the inline executor's sweeper thread); 0: never.
HIERARCH_AUDIT = {
    "KEYS": env_list("HIERARCH_AUDIT_KEYS", []),
    "HEAD_FILE": env_str("HIERARCH_AUDIT_HEAD_FILE"),
    "EXPORT_SECONDS": env_int("HIERARCH_AUDIT_EXPORT_SECONDS", 300),
}
if HIERARCH_AUDIT["EXPORT_SECONDS"] > 0:
    CELERY_BEAT_SCHEDULE["export-audit-heads"] = {
        "task": "governance.tasks.export_audit_heads_task",
        "schedule": float(HIERARCH_AUDIT["EXPORT_SECONDS"]),
        "options": {"expires": float(HIERARCH_AUDIT["EXPORT_SECONDS"])},
    }
# --- end of the audit log's settings ---

# --- Sign-in lockout (issue 16, item 6; django-axes, governance/lockout.py) ---
# After FAILURE_LIMIT failed sign-ins (the admin's and console's form, or bad API bearer
# tokens) a username and a client are each locked out for COOLOFF_MINUTES, counted in the
# database (axes' database handler: every server process and worker sees the same counts,
# on SQLite and PostgreSQL alike). The client is REMOTE_ADDR; behind reverse proxies that
# append to X-Forwarded-For, HIERARCH_TRUSTED_PROXIES says how many (a client can write that
# header itself, so it is not read otherwise). Unlock: manage.py axes_reset,
# axes_reset_username USERNAME, axes_reset_ip IP.
HIERARCH_LOGIN = {
    "FAILURE_LIMIT": env_int("HIERARCH_LOGIN_FAILURE_LIMIT", 5),
    "COOLOFF_MINUTES": env_float("HIERARCH_LOGIN_COOLOFF_MINUTES", 15.0),
    "TRUSTED_PROXIES": env_int("HIERARCH_TRUSTED_PROXIES", 0),
}
if HIERARCH_LOGIN["FAILURE_LIMIT"] < 1 or HIERARCH_LOGIN["COOLOFF_MINUTES"] <= 0:
    raise ImproperlyConfigured(
        "HIERARCH_LOGIN_FAILURE_LIMIT must be 1 or more and HIERARCH_LOGIN_COOLOFF_MINUTES "
        "more than 0"
    )
INSTALLED_APPS.append("axes")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # last, as axes asks
AUTHENTICATION_BACKENDS.insert(0, "axes.backends.AxesStandaloneBackend")  # first, as axes asks
AXES_FAILURE_LIMIT = HIERARCH_LOGIN["FAILURE_LIMIT"]
AXES_COOLOFF_TIME = timedelta(minutes=HIERARCH_LOGIN["COOLOFF_MINUTES"])
AXES_LOCKOUT_PARAMETERS = "governance.lockout.lockout_parameters"
AXES_LOCKOUT_CALLABLE = "governance.views.locked_out"
AXES_CLIENT_IP_CALLABLE = "governance.lockout.client_ip"
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
# A successful sign-in does not clear the client's failures: with it, a guesser who has an
# account of their own could sign into it between guesses to start counting again.
AXES_RESET_ON_SUCCESS = False
AXES_VERBOSE = False  # no banner at every start; failures and lockouts are still logged
# --- end of the sign-in lockout's settings ---

# Governance defaults, in one namespaced dict.
HIERARCH_GOVERNANCE = {
    "DEFAULT_MAX_RECURSION_DEPTH": 5,
    "MAX_TAGS": 20,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "LiteLLM": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        # Its DEBUG trace logs raw response headers, which may echo a tool's credential.
        "httpcore": {"level": "INFO"},
    },
}
