"""SamplingParams fields of an API request, checked in the view so that a bad value is a 400
(in the request's own field names) before anything is queued."""

from __future__ import annotations

from typing import Dict, Optional

from inference.engine import SamplingParams

from . import caps
from .errors import ApiError


def checked_params(
    values: dict, names: Optional[Dict[str, str]] = None, max_stop: int = caps.MAX_STOP, choices: int = 1
) -> dict:
    """``values`` (SamplingParams field -> request value; None or False = unset, the engine's
    default) as JSON-able job params. ``names`` maps an engine field to the request's name for
    it, for messages; ``max_stop`` caps the stop sequences (each at most ``caps.MAX_STOP_CHARS``);
    ``choices`` is how many outputs the request asks for (``max_tokens`` each)."""
    names = names or {}
    values = {k: v for k, v in values.items() if v is not None and v is not False}
    caps.stops(values.get("stop"), max_stop, names.get("stop", "stop"))
    caps.output_tokens(values.get("max_tokens"), choices, names.get("max_tokens", "max_tokens"))
    try:
        params = SamplingParams(**values)
    except ValueError as exc:
        error = ApiError.bad_value(exc)
        name = names.get(error.param)
        if name is not None:
            error.message = error.message.replace(f"{error.param}=", f"{name}=", 1)
            error.param = name
        raise error from None
    if "stop" in values:
        values["stop"] = list(params.stop)  # a JSON-able list for the job
    return values
