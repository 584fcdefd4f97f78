from django.apps import AppConfig


class AdminPanelConfig(AppConfig):
    """The web admin console at /admin (pages, websocket consumers, benchmarks)."""

    name = "admin_panel"
    default_auto_field = "django.db.models.BigAutoField"
