from django.apps import AppConfig


class CacheConfig(AppConfig):
    """The KV block cache: prefix index, hot and cold tiers. Imports neither other app."""

    name = "cache"
    label = "omlx_cache"
    default_auto_field = "django.db.models.BigAutoField"
