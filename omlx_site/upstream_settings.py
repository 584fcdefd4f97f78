"""An upstream oMLX ``settings.json`` found where omlx keeps its own (both use
``~/.omlx/settings.json``): converted to omlx's keys on the first start that reads it.

Upstream's file is nested in sections (``{"version": "1.0", "server": {"port": 8000}, "model":
{"model_dirs": [...]}, "cache": {...}, "auth": {...}, ...}``); omlx's is flat (docs/settings.md), and
never has an object as a value, so a file with one of upstream's sections holding an object is
upstream's. The settings that have an equivalent in omlx's table are carried over; the others are
named in a warning. The original file is kept beside it as ``settings.json.upstream-<time>``
before the converted one takes its place (mode 0600: it may hold the API key).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

SECTIONS = (
    "server",
    "model",
    "memory",
    "scheduler",
    "cache",
    "auth",
    "mcp",
    "huggingface",
    "modelscope",
    "network",
    "sampling",
    "logging",
    "claude_code",
    "integrations",
    "ui",
    "usage",
    "idle_timeout",
)


def _text(v):
    return v if isinstance(v, str) and v.strip() else None


def _not(value, zero=("0",)):
    """Upstream's value unless it means "upstream's default behaviour" (auto, 0, empty)."""
    if isinstance(value, str) and (not value.strip() or value.strip().lower() in ("auto", *zero)):
        return None
    return None if value in (0, None) else value


# (section, key) -> (omlx key, value from upstream's value; None: nothing to carry over)
MAPPING: Dict[Tuple[str, str], Tuple[str, Callable[[Any], Any]]] = {
    ("server", "host"): ("host", _text),
    ("server", "port"): ("port", lambda v: v),
    ("model", "model_dirs"): ("model_dir", lambda v: v or None),
    ("scheduler", "max_concurrent_requests"): ("max_concurrent_requests", lambda v: v),
    ("cache", "ssd_cache_dir"): ("paged_ssd_cache_dir", _text),
    ("cache", "ssd_cache_max_size"): ("paged_ssd_cache_max_size", _not),
    ("cache", "hot_cache_max_size"): ("hot_cache_max_size", _not),  # upstream's "0": no extra RAM tier
    ("auth", "api_key"): ("api_key", _text),
    ("logging", "log_dir"): ("log_dir", _text),
    ("huggingface", "hf_cache_enabled"): ("hf_cache", lambda v: "off" if v is False else None),
}
# Read together with a mapped key, or meaning nothing in omlx: never reported as left out.
_SILENT = {("model", "model_dir"), ("cache", "enabled"), ("cache", "hot_cache_only")}


def is_upstream(data: dict) -> bool:
    return any(isinstance(data.get(section), dict) for section in SECTIONS)


def convert(data: dict, table: Mapping[str, Any]) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """(omlx's settings as settings.json values, "section.key -> key" carried over, what has no
    equivalent or a value omlx refuses, as "section.key" or "section.*"). ``table`` is omlx's
    settings table by key (``config.BY_KEY``), passed in so that config can import this module."""
    values: Dict[str, Any] = {}
    carried: List[str] = []
    left: List[str] = []
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    if not model.get("model_dirs") and _text(model.get("model_dir")):
        model = dict(model, model_dirs=[model["model_dir"]])  # upstream's older single folder
    cache = data.get("cache") if isinstance(data.get("cache"), dict) else {}
    for name in sorted(k for k in data if k != "version"):
        section = model if name == "model" else data[name]
        if not isinstance(section, dict):
            left.append(name)
            continue
        used = []
        for key, raw in section.items():
            if (name, key) in _SILENT or raw is None:
                continue
            target = MAPPING.get((name, key))
            value = target[1](raw) if target else None
            if target is None or value is None:
                if target is None:
                    used.append(f"{name}.{key}")
                continue
            try:
                parsed = table[target[0]].parse(value)
            except (ValueError, TypeError) as exc:
                left.append(f"{name}.{key} ({exc})")
                continue
            values[target[0]] = table[target[0]].kind.json(parsed)
            carried.append(f"{name}.{key} -> {target[0]}")
        mapped_any = any(c.startswith(f"{name}.") for c in carried)
        left.extend(used if mapped_any or len(used) < 3 else [f"{name}.*"])
    if cache.get("enabled") is False or cache.get("hot_cache_only") is True:  # no SSD tier upstream
        values["paged_ssd_cache_dir"] = "off"
        carried.append("cache.enabled/hot_cache_only -> paged_ssd_cache_dir=off")
    return values, carried, left


def adopt(
    path: Path,
    data: dict,
    table: Mapping[str, Any],
    warn: Callable[[str], None],
    write: Callable[[Path, dict], None],
) -> dict:
    """Convert upstream's ``data`` (read from ``path``) with ``table`` (as `convert`), keep the
    original beside it, write the converted file in its place with ``write`` and return the
    converted settings."""
    values, carried, left = convert(data, table)
    backup = _backup(path)
    write(path, values)
    warn(
        f"{path}: an upstream oMLX settings file; converted to omlx's settings (the original is "
        f"kept as {backup})"
    )
    if carried:
        warn(f"{path}: carried over from upstream oMLX: {', '.join(carried)}")
    if left:
        warn(f"{path}: upstream oMLX settings with no equivalent in omlx, not used: {', '.join(left)}")
    return values


def _backup(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    backup: Optional[Path] = None
    for n in range(100):
        candidate = path.with_name(f"{path.name}.upstream-{stamp}" + (f"-{n}" if n else ""))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        backup = candidate
        break
    if backup is None:
        raise OSError(f"no free name for a backup of {path}")
    with os.fdopen(fd, "wb") as f:
        f.write(path.read_bytes())
        f.flush()
        os.fsync(f.fileno())
    return backup
