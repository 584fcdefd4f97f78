"""Every HTTP route of omlx, in one list."""

from django.urls import include, path, re_path
from django.views.generic import RedirectView

from inference.api.omlx import health
from inference.metrics.view import view as metrics_view
from omlx_site import static_files

urlpatterns: list = [
    path("", include("inference.urls")),  # /v1/...: the OpenAI- and Anthropic-compatible API
    path("metrics", metrics_view, name="metrics"),  # Prometheus (docs/metrics.md)
    path("health", health.view, name="health"),  # ready or not, no API key (docs/operations.md)
    path("admin/", include("admin_panel.urls")),  # the web console
    path("admin", RedirectView.as_view(url="/admin/", permanent=False)),
    re_path(r"^static/(?P<path>.+)$", static_files.serve),
]
