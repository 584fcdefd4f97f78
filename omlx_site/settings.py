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

# Embedded default: in-process channel layer and a SQLite-backed Huey.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
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

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"omlx": {"handlers": ["console"], "level": os.environ.get("OMLX_LOG_LEVEL", "INFO")}},
}
