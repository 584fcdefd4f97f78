"""Every HTTP route of omlx, in one list (the admin pages join it in later issues)."""
from django.urls import include, path

from inference import metrics

urlpatterns: list = [
    path("", include("inference.urls")),  # /v1/...: the OpenAI-compatible API
    path("metrics", metrics.view, name="metrics"),  # Prometheus (docs/metrics.md)
]
