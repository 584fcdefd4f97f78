"""Routes of the inference app: the REST API (django-ninja) under /v1/."""
from django.urls import path
from ninja import NinjaAPI

from inference.api import errors
from inference.api.openai import router as openai_router
from inference.api.responses import router as responses_router

api = NinjaAPI(title="omlx", version="1", urls_namespace="omlx-api", docs_url="/v1/docs",
                openapi_url="/v1/openapi.json")
api.add_router("/v1/", openai_router)
api.add_router("/v1/", responses_router)
errors.install(api)

urlpatterns = [path("", api.urls)]
