"""Django settings for omlx.

Everything omlx keeps on disk lives under OMLX_HOME (default ``~/.omlx``), as upstream oMLX does.
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from omlx_site import boundary, config, private_files, redis_policy, secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
OMLX_HOME = config.home()
private_files.make_private(OMLX_HOME)  # umask 077: files 0600, folders 0700 (omlx_site/private_files.py)
# The settings of omlx_site/config.py's table, each under its environment variable's name:
# the environment, then $OMLX_HOME/settings.json, then the default (`omlx serve` exports its flags).
_values = config.load(OMLX_HOME)
globals().update({s.env: _values[s.key] for s in config.SETTINGS})
# Every setting's value as this process started (the console's Settings page tells what a restart
# would change; omlx_site/live_settings.py applies the others at once).
OMLX_SETTINGS_AT_START = dict(_values)

# Signs the admin console's session cookies and CSRF tokens: OMLX_SECRET_KEY, else a random key
# made once and kept in $OMLX_HOME/secret_key (0600), so logins survive restarts.
SECRET_KEY = os.environ.get("OMLX_SECRET_KEY") or secret_key.load(OMLX_HOME)
DEBUG = os.environ.get("OMLX_DEBUG", "") == "1"
# The browser boundary (omlx_site/boundary.py, docs/security.md): the Host names this server answers
# (the loopback names, --host, --allowed-hosts; any port), and the web origins whose pages may call
# the API (--cors-origins).
ALLOWED_HOSTS = boundary.allowed_hosts(_values["host"], _values["allowed_hosts"])
OMLX_CORS_ORIGIN_LIST = boundary.parse_origins(_values["cors_origins"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "channels",
    "huey.contrib.djhuey",
    "django_htmx",
    "inference",
    "cache",
    "admin_panel",
]

MIDDLEWARE = [
    "omlx_site.middleware.request_metrics",  # first: counts the status the client gets (/metrics)
    # Django's own three, their hooks run on the event loop (omlx_site/middleware.py: no thread hops)
    "omlx_site.middleware.SecurityMiddleware",
    "omlx_site.middleware.SessionMiddleware",
    "omlx_site.middleware.CommonMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "omlx_site.middleware.api_error_envelope",
    "inference.keys.middleware.api_keys",  # who asks on /v1 and /metrics (401, 429; scopes: routes)
]

ROOT_URLCONF = "omlx_site.urls"
ASGI_APPLICATION = "omlx_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "admin_panel.context_processors.console",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("OMLX_DATABASE", str(OMLX_HOME / "omlx.sqlite3")),
        # Several threads write (views, Huey workers, the cold tier's writer). A transaction that
        # reads and then writes would fail at once with "database is locked" when another wrote in
        # between (SQLite cannot wait on a lock upgrade); IMMEDIATE takes the write lock at BEGIN,
        # where SQLite does wait, up to the timeout (seconds).
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
    }
}

# Embedded default: in-process channel layer and a SQLite-backed Huey. A request's tokens wait in
# its channel until the view reads them: the capacity must hold a whole reply (a full channel drops).
# With OMLX_REDIS_URL (`omlx serve --redis-url`), Huey's queue and the channel layer live in Redis, so
# `omlx worker` / `manage.py run_huey` processes (here or on other machines) run the inference.
# The channel layer is Redis pub/sub (channels_redis.pubsub): one PUBLISH per event, delivered in the
# order one connection sent them, nothing kept for a listener that has gone. The list-based
# RedisChannelLayer orders a channel by send timestamps (equal or stepped-back clocks reorder
# tokens), caps each channel (100 by default) and expires messages: wrong for token streams.
# Nothing read from Redis is unpickled: jobs and events are JSON signed with OMLX_REDIS_SECRET
# (inference/dispatch/signed_*.py); omlx_site/redis_policy.py refuses a Redis that others could fill.
OMLX_REDIS_URL = _values["redis_url"]
if OMLX_REDIS_URL:
    try:
        redis_policy.check(_values)
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "inference.dispatch.signed_layer.SignedRedisChannelLayer",
            "CONFIG": {"hosts": [OMLX_REDIS_URL], "prefix": "omlx", "redis_secret": _values["redis_secret"]},
        }
    }
    HUEY = {
        "huey_class": "inference.dispatch.signed_huey.SignedRedisHuey",
        "name": "omlx",
        "connection": {"url": OMLX_REDIS_URL, "redis_secret": _values["redis_secret"]},
        "immediate": False,
        # `manage.py run_huey`: threads share the process's engines (one MLX thread per model).
        "consumer": {"workers": max(1, _values["workers"] or 2), "worker_type": "thread"},
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 100_000}}
    }
    HUEY = {
        "huey_class": "inference.dispatch.huey_consumer.QueueHuey",  # SqliteHuey without an fsync per commit
        "name": "omlx",
        "filename": str(OMLX_HOME / "huey.sqlite3"),
        "immediate": False,
    }

# The console's login (admin_panel/auth.py): named cookies, so that other local apps on this host
# (cookies ignore the port) keep theirs.
SESSION_COOKIE_NAME = "omlx_sessionid"
CSRF_COOKIE_NAME = "omlx_csrftoken"
SESSION_COOKIE_SAMESITE = "Lax"

STATIC_URL = "static/"  # served by omlx_site/static_files.py (Daphne serves no files itself)
STATICFILES_DIRS = [BASE_DIR / "static"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Logs (docs/operations.md): the console in the human format; a JSON-lines file per process, rotated
# by size (omlx_site/json_log.py): OMLX_LOG_DIR/server.log for `omlx serve`, worker-<pid>.log for each
# `omlx worker`; "off" writes none. Other loggers (Django, Daphne, Huey) from WARNING up.
# (OMLX_LOG_DIR, OMLX_LOG_MAX_BYTES, OMLX_LOG_BACKUPS: rows of the table.)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {"()": "omlx_site.json_log.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "file": {
            "()": "omlx_site.json_log.ProcessLogFile",
            "formatter": "json",
            "directory": _values["log_dir"],
            "max_bytes": _values["log_max_bytes"],
            "backups": _values["log_backups"],
        },
    },
    "loggers": {
        "omlx": {
            "handlers": ["console", "file"],
            "level": os.environ.get("OMLX_LOG_LEVEL", "INFO"),
            "propagate": False,
        }
    },
    "root": {"handlers": ["console", "file"], "level": "WARNING"},
}
# OMLX_SHUTDOWN_GRACE_SECONDS (a row of the table): `omlx serve` on SIGTERM / SIGINT lets running
# requests finish for this long, then aborts them (omlx_site/shutdown.py).

# Each row of omlx_site/config.py's table is set above under its environment variable's name
# (docs/settings.md lists them); what follows derives from them.
# Cold tier of the KV block cache (cache/cold_tier.py; GC in cache/gc.py, run by cache/tasks.py):
# block files live in OMLX_COLD_CACHE_DIR/<model fingerprint>/ (None: RAM only); the cap
# (OMLX_COLD_CACHE_MAX_BYTES) and the TTL (OMLX_COLD_CACHE_TTL_SECONDS) cover every model's blocks.
# OMLX_API_HANDOFF "huey": the view submits a Huey task and the worker hands it to the engine (the
# design); "direct": the view hands it to the engine itself (same code, no queue; for comparisons).
# inference/dispatch/ reads it, with OMLX_REDIS_URL, once: one backend per process.
OMLX_API_KEY = _values["api_key"] or None
# Huey worker threads of the consumer inside `omlx serve` (`--workers`): 2 by default; with Redis
# 0 by default (separate `omlx worker` processes run the inference), and `omlx worker --threads`.
# OMLX_HUEY_MAX_POLL_DELAY: the longest idle poll of the SQLite queue (seconds): tasks queued by the
# server wake the workers at once; others wait at most this long (Redis queues block instead).
OMLX_HUEY_WORKERS = _values["workers"] if _values["workers"] is not None else (0 if OMLX_REDIS_URL else 2)

# Limits of the API (inference/api/common/limits.py). A body over OMLX_MAX_REQUEST_BYTES gets a 413; for one
# model, choices in flight (running or waiting in this server) beyond max concurrent + max queued
# get a 429 with Retry-After. Redis mode: a worker process counts as running while its heartbeat is
# younger than OMLX_WORKER_HEARTBEAT_SECONDS; with none running, requests get a 503 at once.
DATA_UPLOAD_MAX_MEMORY_SIZE = _values["max_request_size"]

# The model pool (inference/pool; docs/models.md): OMLX_MODEL_DIRS in order, the first one that has
# an id wins. OMLX_MAX_MODEL_MEMORY: memory for loaded models (weights + KV cache + hot tier,
# estimated before loading); OMLX_MAX_PROCESS_MEMORY adds what the process already uses: "auto" is
# RAM minus 8 GiB (at least half of RAM), as upstream oMLX.
OMLX_MODEL_DIRS = _values["model_dir"]
OMLX_MODEL_DIR = OMLX_MODEL_DIRS[0]
