"""omlx's model management routes (not in OpenAI's API), next to GET /v1/models:

    GET   /v1/models/status            every folder found (servable or not) with its type, size,
                                       memory estimate, loaded / pinned / TTL, and the limits
    POST  /v1/models/rescan            rescan the model directories now
    POST  /v1/models/{id}/load         load a model (507 when it cannot fit)
    POST  /v1/models/{id}/unload       unload it (409 while requests are in flight)
    GET   /v1/models/{id}/settings     its per-model settings
    PATCH /v1/models/{id}/settings     change some of them (JSON object; null resets a field)

Ids may contain a slash (org/name); an alias works wherever an id does.
"""

from __future__ import annotations


from asgiref.sync import sync_to_async
from ninja import Router

from inference.engine import ModelLoadError
from inference.pool import InsufficientMemory, ModelBusy, ModelUnavailable, get_pool

from inference.api.common import json_body
from inference.api.common.auth import check_api_key
from inference.keys import scopes
from inference.api.common.errors import ApiError

router = Router(tags=["omlx models"])


@router.get("/models/status")
def models_status(request):
    check_api_key(request, scopes.MODELS)
    return get_pool().status()


@router.post("/models/rescan")
def models_rescan(request):
    check_api_key(request, scopes.MODELS)
    get_pool().rescan()
    return get_pool().status()


@router.post("/models/{path:model_id}/load")
async def load_model(request, model_id: str):
    check_api_key(request, scopes.MODELS)
    pool = get_pool()
    try:
        await sync_to_async(pool.engine, thread_sensitive=False)(model_id)
    except ModelUnavailable as exc:
        raise ApiError(400, str(exc), param="model") from None
    except KeyError:
        raise _not_found(model_id) from None
    except InsufficientMemory as exc:
        raise ApiError(507, str(exc), code="insufficient_memory") from None
    except ModelLoadError as exc:
        raise ApiError(500, f"The model '{model_id}' cannot be loaded: {exc}") from None
    return await sync_to_async(_row)(model_id)


@router.post("/models/{path:model_id}/unload")
async def unload_model(request, model_id: str):
    check_api_key(request, scopes.MODELS)
    pool = get_pool()
    if pool.resolve(model_id) is None:
        raise _not_found(model_id)
    try:
        await sync_to_async(pool.unload, thread_sensitive=False)(model_id)
    except ModelBusy as exc:
        raise ApiError(409, str(exc), code="model_busy") from None
    return await sync_to_async(_row)(model_id)


@router.get("/models/{path:model_id}/settings")
def get_settings(request, model_id: str):
    check_api_key(request, scopes.MODELS)
    pool = get_pool()
    model_id = _known(pool, model_id)
    return dict(pool.settings(model_id), id=model_id)


@router.patch("/models/{path:model_id}/settings")
def patch_settings(request, model_id: str):
    check_api_key(request, scopes.MODELS)
    pool = get_pool()
    model_id = _known(pool, model_id)
    try:
        changes = json_body.parse(request.body or b"{}")
    except (json_body.BodyTooDeep, json_body.BodyNotText) as exc:
        raise ApiError(400, str(exc)) from None
    except ValueError:  # UnicodeDecodeError is one
        raise ApiError(400, "The request body is not valid JSON") from None
    try:
        saved = pool.update_settings(model_id, changes)
    except ValueError as exc:
        raise ApiError.bad_value(exc) from None
    return dict(saved, id=model_id)


def _known(pool, name: str) -> str:
    """The id of a discovered folder (servable or not), or of a model by alias."""
    if name in pool.folders():
        return name
    model_id = pool.resolve(name)
    if model_id is None:
        raise _not_found(name)
    return model_id


def _row(name: str) -> dict:
    pool = get_pool()
    model_id = pool.resolve(name) or name
    return next(row for row in pool.status()["data"] if row["id"] == model_id)


def _not_found(model_id: str) -> ApiError:
    return ApiError(404, f"The model '{model_id}' does not exist", param="model", code="model_not_found")
