"""Django settings for omlx.

Everything omlx keeps on disk lives under OMLX_HOME (default ``~/.omlx``), as upstream oMLX does.
"""
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
OMLX_HOME = Path(os.environ.get("OMLX_HOME", Path.home() / ".omlx")).expanduser()
OMLX_HOME.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("OMLX_SECRET_KEY", "omlx-local-only-not-secret")
DEBUG = os.environ.get("OMLX_DEBUG", "") == "1"
ALLOWED_HOSTS = ["*"]

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
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "omlx_site.middleware.ApiErrorEnvelopeMiddleware",
]

ROOT_URLCONF = "omlx_site.urls"
ASGI_APPLICATION = "omlx_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("OMLX_DATABASE", str(OMLX_HOME / "omlx.sqlite3")),
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
OMLX_REDIS_URL = os.environ.get("OMLX_REDIS_URL") or None
if OMLX_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [OMLX_REDIS_URL], "prefix": "omlx"},
        }
    }
    HUEY = {
        "huey_class": "huey.RedisHuey",
        "name": "omlx",
        "connection": {"url": OMLX_REDIS_URL},
        "immediate": False,
        # `manage.py run_huey`: threads share the process's engines (one MLX thread per model).
        "consumer": {"workers": max(1, int(os.environ.get("OMLX_HUEY_WORKERS") or 2)), "worker_type": "thread"},
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 100_000}}
    }
    HUEY = {
        "huey_class": "huey.SqliteHuey",
        "name": "omlx",
        "filename": str(OMLX_HOME / "huey.sqlite3"),
        "immediate": False,
    }

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Logs (docs/operations.md): the console in the human format; a JSON-lines file per process, rotated
# by size (omlx_site/json_log.py): OMLX_LOG_DIR/server.log for `omlx serve`, worker-<pid>.log for each
# `omlx worker`; "off" writes none. Other loggers (Django, Daphne, Huey) from WARNING up.
_log_dir = os.environ.get("OMLX_LOG_DIR", str(OMLX_HOME / "logs"))
OMLX_LOG_DIR = None if _log_dir.lower() in ("", "off", "none") else Path(_log_dir).expanduser()
OMLX_LOG_MAX_BYTES = int(os.environ.get("OMLX_LOG_MAX_BYTES") or 10 * 1024 * 1024)
OMLX_LOG_BACKUPS = int(os.environ.get("OMLX_LOG_BACKUPS") or 5)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
                   "json": {"()": "omlx_site.json_log.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"},
                 "file": {"()": "omlx_site.json_log.ProcessLogFile", "formatter": "json",
                          "directory": OMLX_LOG_DIR, "max_bytes": OMLX_LOG_MAX_BYTES,
                          "backups": OMLX_LOG_BACKUPS}},
    "loggers": {"omlx": {"handlers": ["console", "file"], "level": os.environ.get("OMLX_LOG_LEVEL", "INFO"),
                         "propagate": False}},
    "root": {"handlers": ["console", "file"], "level": "WARNING"},
}
# `omlx serve` on SIGTERM / SIGINT: running requests may finish for this long, then are aborted
# (omlx_site/shutdown.py).
OMLX_SHUTDOWN_GRACE_SECONDS = max(0.0, float(os.environ.get("OMLX_SHUTDOWN_GRACE_SECONDS") or 10))

# Cold tier of the KV block cache (cache/cold_tier.py; GC in cache/gc.py, run by cache/tasks.py).
# Block files live in OMLX_COLD_CACHE_DIR/<model fingerprint>/; the cap and the TTL cover every
# model's blocks together. None = unlimited / no expiry.
# `omlx serve --paged-ssd-cache-dir off` (OMLX_COLD_CACHE_DIR=off) keeps blocks in RAM only.
_cold_dir = os.environ.get("OMLX_COLD_CACHE_DIR", str(OMLX_HOME / "cache"))
OMLX_COLD_CACHE_DIR = None if _cold_dir.lower() in ("", "off", "none") else Path(_cold_dir).expanduser()
OMLX_COLD_CACHE_MAX_BYTES = int(os.environ["OMLX_COLD_CACHE_MAX_BYTES"]) if os.environ.get("OMLX_COLD_CACHE_MAX_BYTES") else None
OMLX_COLD_CACHE_TTL_SECONDS = float(os.environ["OMLX_COLD_CACHE_TTL_SECONDS"]) if os.environ.get("OMLX_COLD_CACHE_TTL_SECONDS") else None
# Hot tier (RAM) per model: bytes, "4GiB" or a percentage of RAM ("10%").
OMLX_HOT_CACHE_MAX_SIZE = os.environ.get("OMLX_HOT_CACHE_MAX_SIZE", "10%")

# The API server (`omlx serve` sets these from its flags; omlx_site/cli.py).
# OMLX_MODEL_DIR: model folders (config.json + safetensors) at depth 1; none: the demo model.
OMLX_MODEL_DIR = Path(os.environ.get("OMLX_MODEL_DIR", OMLX_HOME / "models")).expanduser()
OMLX_MAX_CONCURRENT_REQUESTS = int(os.environ.get("OMLX_MAX_CONCURRENT_REQUESTS", "16"))
OMLX_API_KEY = os.environ.get("OMLX_API_KEY") or None
# "huey": the view submits a Huey task and the worker hands it to the engine (the design);
# "direct": the view hands it to the engine itself (same code, no queue; for comparisons).
OMLX_API_HANDOFF = os.environ.get("OMLX_API_HANDOFF", "huey")
OMLX_SSE_KEEPALIVE_SECONDS = float(os.environ.get("OMLX_SSE_KEEPALIVE_SECONDS", "10"))
# Huey worker threads of the consumer inside `omlx serve` (`--workers`): 2 by default; with Redis
# 0 by default (separate `omlx worker` processes run the inference), and `omlx worker --threads`.
# The longest idle poll of the SQLite queue (seconds): tasks queued by the server wake the workers
# at once; others wait at most this long (Redis queues block instead of polling).
OMLX_HUEY_WORKERS = int(os.environ.get("OMLX_HUEY_WORKERS") or (0 if OMLX_REDIS_URL else 2))
OMLX_HUEY_MAX_POLL_DELAY = float(os.environ.get("OMLX_HUEY_MAX_POLL_DELAY", "0.5"))

# Limits of the API (inference/api/limits.py). A body over OMLX_MAX_REQUEST_BYTES gets a 413; for one
# model, choices in flight (running or waiting in this server) beyond max concurrent + max queued
# get a 429 with Retry-After.
OMLX_MAX_REQUEST_BYTES = int(os.environ.get("OMLX_MAX_REQUEST_BYTES") or 32 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = OMLX_MAX_REQUEST_BYTES
OMLX_MAX_QUEUED_REQUESTS = int(os.environ.get("OMLX_MAX_QUEUED_REQUESTS") or 256)
OMLX_RETRY_AFTER_SECONDS = int(os.environ.get("OMLX_RETRY_AFTER_SECONDS") or 1)
# Redis mode: a worker process counts as running while its heartbeat (every few seconds) is younger
# than this; with none running, requests get a 503 at once instead of waiting in the queue.
OMLX_WORKER_HEARTBEAT_SECONDS = float(os.environ.get("OMLX_WORKER_HEARTBEAT_SECONDS") or 15)

# The model pool (inference/pool; docs/models.md). OMLX_MODEL_DIR may list several directories,
# separated by os.pathsep (":" on Linux and macOS); the first one that has an id wins.
OMLX_MODEL_DIRS = [Path(d).expanduser() for d in os.environ.get("OMLX_MODEL_DIR", "").split(os.pathsep) if d] or [OMLX_MODEL_DIR]
# Memory for loaded models (weights + KV cache + hot tier, estimated before loading): a size
# ("32GB", "80%" of RAM) or "disabled". The process limit adds what the process already uses:
# "auto" is RAM minus 8 GiB (at least half of RAM), as upstream oMLX.
OMLX_MODEL_DIR = OMLX_MODEL_DIRS[0]
OMLX_MAX_MODEL_MEMORY = os.environ.get("OMLX_MAX_MODEL_MEMORY", "80%")
OMLX_MAX_PROCESS_MEMORY = os.environ.get("OMLX_MAX_PROCESS_MEMORY", "auto")
