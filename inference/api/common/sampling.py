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


# The request's names of the fields ``speculative_fields`` sets, for ``checked_params``' messages.
SPECULATIVE_NAMES = {"speculative": "speculative", "num_draft_tokens": "speculative.num_draft_tokens"}


def speculative_fields(value) -> dict:
    """SamplingParams fields of the request's ``speculative`` extension: ``false`` (off),
    ``true`` (prompt lookup with the model's draft length) or ``{"method": "off" | "lookup" | "suffix",
    "num_draft_tokens": k}`` (either key may be left out); None: the model's settings. A 400
    for anything else (the values themselves are checked with the other fields)."""
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"speculative": "lookup" if value else "off"}
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"method", "num_draft_tokens"})
        if not unknown:
            return {
                "speculative": value.get("method", "lookup"),
                "num_draft_tokens": value.get("num_draft_tokens"),
            }
        raise ApiError(
            400,
            f"speculative: unknown key {unknown[0]!r} (known: method, num_draft_tokens)",
            param="speculative",
        )
    raise ApiError(400, "speculative: must be true, false or an object", param="speculative")
