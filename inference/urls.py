"""Routes of the inference app: the REST API (django-ninja) under /v1/ (chat, completions,
Responses, models, cache status, embeddings and rerank; Anthropic Messages in its own API)."""

from django.urls import path
from ninja import NinjaAPI

from inference.api.anthropic import errors as anthropic_errors
from inference.api.anthropic.routes import router as anthropic_router
from inference.api.common import errors
from inference.api.common.json_body import JsonBodyParser
from inference.api.omlx.cache_status import router as cache_status_router
from inference.api.omlx.mcp import router as mcp_router
from inference.api.omlx.models import router as models_router
from inference.api.omlx.step_trace import router as step_trace_router
from inference.api.openai.embeddings import router as embeddings_router
from inference.api.openai.routes import router as openai_router
from inference.api.responses.routes import router as responses_router

api = NinjaAPI(
    title="omlx",
    version="1",
    urls_namespace="omlx-api",
    docs_url="/v1/docs",
    openapi_url="/v1/openapi.json",
    parser=JsonBodyParser(),
)
api.add_router("/v1/", openai_router)
api.add_router("/v1/", models_router)
api.add_router("/v1/", responses_router)
api.add_router("/v1/", cache_status_router)
api.add_router("/v1/", step_trace_router)
api.add_router("/v1/", mcp_router)
api.add_router("/v1/", embeddings_router)
errors.install(api)

# The Anthropic routes (/v1/messages...) answer errors in Anthropic's envelope: an API of their own.
anthropic_api = NinjaAPI(
    title="omlx (Anthropic Messages)",
    version="1",
    urls_namespace="omlx-anthropic",
    docs_url=None,
    openapi_url="/v1/anthropic/openapi.json",
    parser=JsonBodyParser(),
)
anthropic_api.add_router("/v1/", anthropic_router)
anthropic_errors.install(anthropic_api)

urlpatterns = [path("", api.urls), path("", anthropic_api.urls)]
