from django.apps import AppConfig


class InferenceConfig(AppConfig):
    """Engine, scheduler, model loading (and later the REST API and model pool)."""

    name = "inference"
    default_auto_field = "django.db.models.BigAutoField"
