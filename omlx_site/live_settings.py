"""Applying a setting changed while the server runs (the console's Settings page), for the rows of
omlx_site/config.py's table whose ``applies`` is "now" or "next load".

A setting's value lives in ``django.conf.settings`` under its environment variable's name; the code
that reads it at use time (admission limits, the body limit, the API key, the cold tier's GC, SSE
keep-alives) sees a new value there at once. The model pool copied some at its start: they are
changed on the pool too (its folders and memory limits at once; the engine settings for models
loaded after the change). This process only: `omlx worker` processes (Redis mode) take the file's
values when they start.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from django.conf import settings

from inference.pool import current_pool
from inference.pool.memory import auto_process_limit, parse_limit
from omlx_site.config import BY_KEY


def _model_dirs(settings, pool, value) -> None:
    settings.OMLX_MODEL_DIRS = list(value)
    settings.OMLX_MODEL_DIR = value[0]
    if pool is not None:
        pool.model_dirs = list(value)  # the next look at the folders rescans (their signature changed)


def _hf_cache(settings, pool, value) -> None:
    settings.OMLX_HF_CACHE = value
    if pool is not None:
        pool.hf_cache_dir = value


def _memory(attribute: str, auto: bool) -> Callable:
    def apply(settings, pool, value) -> None:
        setattr(settings, BY_KEY[attribute].env, value)
        if pool is not None:
            setattr(
                pool, attribute, parse_limit(value, attribute, auto=auto_process_limit() if auto else None)
            )

    return apply


def _engine(field: str) -> Callable:
    def apply(settings, pool, value) -> None:
        setattr(settings, BY_KEY[field].env, value)
        if pool is not None:
            pool.engine_settings[field] = value
            pool.forget_estimates()  # the next load's estimate follows the new value

    return apply


def _draft_model(settings, pool, value) -> None:
    settings.OMLX_DRAFT_MODEL = value
    if pool is not None:
        pool.draft_model = value or None  # for the models loaded from now on


def _request_size(settings, pool, value) -> None:
    settings.OMLX_MAX_REQUEST_BYTES = value
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = value


def _api_key(settings, pool, value) -> None:
    settings.OMLX_API_KEY = value or None  # the console's sessions made with another key end


def _plain(key: str) -> Callable:
    def apply(settings, pool, value) -> None:
        setattr(settings, BY_KEY[key].env, value)

    return apply


APPLIERS: Dict[str, Callable[[Any, Any, Any], None]] = {
    "model_dir": _model_dirs,
    "hf_cache": _hf_cache,
    "max_model_memory": _memory("max_model_memory", auto=False),
    "max_process_memory": _memory("max_process_memory", auto=True),
    "max_concurrent_requests": _engine("max_concurrent_requests"),
    "max_batch_wait_ms": _engine("max_batch_wait_ms"),
    "max_step_ms": _engine("max_step_ms"),
    "speculative": _engine("speculative"),
    "num_draft_tokens": _engine("num_draft_tokens"),
    "draft_model": _draft_model,
    "hot_cache_max_size": _engine("hot_cache_max_size"),
    "kv_bits": _engine("kv_bits"),
    "kv_group_size": _engine("kv_group_size"),
    "paged_ssd_cache_bits": _engine("paged_ssd_cache_bits"),
    "paged_ssd_cache_max_size": _plain("paged_ssd_cache_max_size"),
    "paged_ssd_cache_ttl": _plain("paged_ssd_cache_ttl"),
    "api_key": _api_key,
    "max_request_size": _request_size,
    "max_queued_requests": _plain("max_queued_requests"),
    "retry_after_seconds": _plain("retry_after_seconds"),
    "sse_keepalive_seconds": _plain("sse_keepalive_seconds"),
    "response_ttl_days": _plain("response_ttl_days"),
    "max_response_chain": _plain("max_response_chain"),
}


def apply(key: str, value: Any) -> bool:
    """Put ``value`` (parsed) in force in this process; False when ``key`` needs a restart."""
    applier = APPLIERS.get(key)
    if applier is None:
        return False
    applier(settings, current_pool(), value)
    return True
