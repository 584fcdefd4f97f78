"""Every HTTP route of omlx, in one list (the admin pages join it in later issues)."""
from django.urls import include, path

urlpatterns: list = [
    path("", include("inference.urls")),  # /v1/...: the OpenAI-compatible API
]
