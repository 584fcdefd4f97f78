"""Reading and changing per-model settings (the ``ModelSettings`` rows), checked, and applying
them to loaded engines.

The REST API (``inference.api.omlx.models``) and the admin console use these functions; the model
pool keeps a snapshot of every row and reloads it (``reread``) after a change
(``ModelPool.update_settings``) and at least every ``ModelPool.SETTINGS_MAX_AGE`` seconds from the
worker, so other processes see changes too; each reload hands the changed engine settings to the
loaded engines (``tune_loaded``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Dict, Optional

from .discovery import KINDS

logger = logging.getLogger("omlx.models")

SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "priority",
)
# The model's engine settings over the server-wide ones; a loaded engine takes a change at once
# (``Engine.tune``).
ENGINE_FIELDS = ("max_batch_wait_ms", "max_step_ms", "speculative", "num_draft_tokens")
# The model's KV format over the server's: taken when the model is next loaded (an engine's
# caches and its blocks' fingerprint are made at load). kv_bits 0: float KV for this model.
LOAD_FIELDS = ("kv_bits", "kv_group_size")
FIELDS = (
    "alias",
    "pinned",
    "ttl_seconds",
    "context_length",
    "model_type",
    *SAMPLING_FIELDS,
    *ENGINE_FIELDS,
    *LOAD_FIELDS,
    "draft_model",
    "chat_template_kwargs",
    "tool_parser",
)


def engine_overrides(values: dict) -> dict:
    """The engine settings a model's settings set (the others follow the server's)."""
    return {name: values[name] for name in ENGINE_FIELDS if values.get(name) is not None}


def load_overrides(values: dict) -> dict:
    """The load-time engine settings (KV format) a model's settings set (kv_bits 0: None)."""
    out = {name: values[name] for name in LOAD_FIELDS if values.get(name) is not None}
    if out.get("kv_bits") == 0:
        out["kv_bits"] = None
    return out


def all_overrides(values: dict) -> dict:
    """Every engine setting a model's settings set (for its next load)."""
    return {**engine_overrides(values), **load_overrides(values)}


def kind_overrides(snapshot: Dict[str, dict]) -> Dict[str, str]:
    """model id -> the kind its settings force (``model_type``), for the models that set one."""
    return {i: v["model_type"] for i, v in snapshot.items() if v.get("model_type")}


def reread(read=None) -> Optional[Dict[str, dict]]:
    """``read()`` (default ``read_all``), or None when it cannot run now: on an event loop's thread
    (the ORM is synchronous; views use the snapshot as it is), or when the rows cannot be read."""
    try:
        asyncio.get_running_loop()
        return None
    except RuntimeError:
        pass
    try:
        return (read or read_all)()
    except Exception as exc:  # no table yet (before migrate), a locked database...
        logger.debug("model settings not read: %s", exc)
        return None


def tune_loaded(
    engines: dict, before: Dict[str, dict], after: Dict[str, dict], server_settings: dict
) -> None:
    """Give every loaded engine (model id -> engine) whose engine settings differ between the
    snapshots ``before`` and ``after`` its new ones at once: the model's over ``server_settings``
    over EngineConfig's defaults. Embedding and reranker engines have none."""
    from inference.engine.config import EngineConfig

    for model_id, engine in engines.items():
        if not hasattr(engine, "tune"):  # an embedding or reranker engine
            continue
        wanted = engine_overrides(after.get(model_id) or {})
        if wanted != engine_overrides(before.get(model_id) or {}):
            live = {
                name: server_settings.get(name, getattr(EngineConfig, name)) for name in EngineConfig.LIVE
            }
            try:
                engine.tune(wait=False, **{**live, **wanted})
            except (RuntimeError, ValueError) as exc:  # closed meanwhile; checked on save
                logger.warning("%s: scheduling settings not applied: %s", model_id, exc)


def defaults() -> dict:
    values = {name: None for name in FIELDS}
    values.update(pinned=False, chat_template_kwargs={})
    return values


def read_all() -> Dict[str, dict]:
    """model id -> its settings (every field), for the models that have a row."""
    from inference.models import ModelSettings

    return {
        row.model_id: {name: getattr(row, name) for name in FIELDS} for row in ModelSettings.objects.all()
    }


def save(model_id: str, changes: dict, known_ids) -> dict:
    """Apply ``changes`` (a subset of FIELDS; None resets a field) to ``model_id``'s settings and
    return them all. ValueError (nothing saved) for an unknown field or a bad value."""
    from inference.models import ModelSettings

    if not isinstance(changes, dict):
        raise ValueError("the settings must be a JSON object")
    unknown = sorted(set(changes) - set(FIELDS))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown setting (known: {', '.join(FIELDS)})")
    current = read_all().get(model_id, defaults())
    values = dict(current, **changes)
    _check(model_id, values, known_ids)
    row, _ = ModelSettings.objects.get_or_create(model_id=model_id)
    for name in FIELDS:
        setattr(row, name, values[name])
    row.save()
    return {name: values[name] for name in FIELDS}


def _check(model_id: str, values: dict, known_ids) -> None:
    from inference.chat.capabilities import check_tool_parser
    from inference.chat.template import check_template_kwargs
    from inference.engine import SamplingParams
    from inference.engine.config import EngineConfig
    from inference.models import ModelSettings

    alias = values["alias"]
    if alias is not None:
        if not isinstance(alias, str) or not alias.strip() or alias != alias.strip():
            raise ValueError("alias: must be a non-empty string without surrounding spaces")
        if alias in known_ids and alias != model_id:
            raise ValueError(f"alias: {alias!r} is the id of another model")
        if ModelSettings.objects.filter(alias=alias).exclude(model_id=model_id).exists():
            raise ValueError(f"alias: {alias!r} is already the alias of another model")
    if values["alias"] == "":
        values["alias"] = None
    if not isinstance(values["pinned"], bool):
        raise ValueError("pinned: must be true or false")
    ttl = values["ttl_seconds"]
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0):
        raise ValueError("ttl_seconds: must be a number of seconds > 0, or null for no TTL")
    limit = values["context_length"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 2):
        raise ValueError("context_length: must be an integer >= 2, or null for the model's own")
    if values["model_type"] is not None and values["model_type"] not in KINDS:
        raise ValueError(f"model_type: must be one of {', '.join(KINDS)}, or null")
    sampling = {name: values[name] for name in SAMPLING_FIELDS if values[name] is not None}
    for name, value in sampling.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}: must be a number, or null")
    SamplingParams(**sampling)  # ValueError "name=value: why"
    for name in ENGINE_FIELDS:
        value = values[name]
        if value is not None:
            if name == "speculative":
                if value not in EngineConfig.SPECULATIVE:
                    raise ValueError(
                        f"speculative: must be one of {', '.join(EngineConfig.SPECULATIVE)}, or null"
                    )
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                what = "an integer" if name == "num_draft_tokens" else "a number of milliseconds"
                raise ValueError(f"{name}: must be {what}, or null for the server's")
            EngineConfig(**{name: value})  # ValueError "name=value: why"
    for name in LOAD_FIELDS:
        value = values[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name}: must be an integer, or null for the server's")
    # Each is checked alone (with the other's default); kv_bits 0 is float KV for this model.
    if values["kv_bits"] not in (None, 0):
        EngineConfig(kv_bits=values["kv_bits"])
    if values["kv_group_size"] is not None:
        EngineConfig(kv_bits=8, kv_group_size=values["kv_group_size"])
    draft = values["draft_model"]
    if draft == "":
        values["draft_model"] = draft = None
    if draft is not None and (not isinstance(draft, str) or draft not in known_ids):
        raise ValueError(f"draft_model: {draft!r} is not the id of a model here (or null for the server's)")
    kwargs = values["chat_template_kwargs"]
    values["chat_template_kwargs"] = check_template_kwargs(kwargs if kwargs is not None else {}) or {}
    values["tool_parser"] = check_tool_parser(values["tool_parser"])
