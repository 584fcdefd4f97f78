"""GET /v1/engine/step_trace: the last steps of each loaded model's engine, one record a step
(omlx's, not in OpenAI's API; inference.engine.step_trace, docs/engine.md "Step trace").

A model records its steps only with the ``step_trace`` setting (``--step-trace N``: the last N
steps); without it its row says ``step_trace: 0`` and has no steps. ``model`` picks one model,
``last`` caps the records of each row (at most ``MAX_STEPS``): the answer's size is bounded
whatever the setting. Embedding and reranker models have no steps and no row.
"""

from __future__ import annotations

from typing import Optional

from ninja import Router

from inference.pool import get_pool

from ..common.auth import check_api_key
from inference.keys import scopes
from ..common.errors import ApiError

router = Router(tags=["omlx engine"])

MAX_STEPS = 1024  # records per model in one answer
DEFAULT_STEPS = 256


@router.get("/engine/step_trace")
def step_trace(request, model: Optional[str] = None, last: int = DEFAULT_STEPS):
    check_api_key(request, scopes.ADMIN)
    if not 1 <= last <= MAX_STEPS:
        raise ApiError(400, f"last={last}: must be in [1, {MAX_STEPS}]", param="last")
    pool = get_pool()
    if model is not None and pool.loaded(model) is None:
        raise ApiError(404, f"the model {model!r} is not loaded", param="model", code="model_not_found")
    rows = []
    for model_id in [pool.resolve(model) or model] if model is not None else pool.ids():
        engine = pool.loaded(model_id)
        if engine is None or not hasattr(engine, "step_trace"):
            continue
        rows.append(
            {
                "id": model_id,
                "step_trace": engine.config.step_trace,
                "steps": [record.as_dict() for record in engine.step_trace(last)],
            }
        )
    return {"object": "list", "data": rows}
