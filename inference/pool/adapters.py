"""LoRA adapter folders in the model directories: what discovery lists for them, and their base.

An adapter folder has an ``adapter_config.json`` and no ``config.json`` (mlx_lm.lora's or PEFT's
files: inference.engine.adapter_config). It is served as its own model id (the folder's, as for
any model) over its base model, which must be a servable LLM among the discovered models: the
base the adapter recorded (``model`` / ``base_model_name_or_path``) is found by folder path
first, then by id, then by the id's last part (``Qwen/Qwen2.5-0.5B`` finds ``Qwen2.5-0.5B``);
an adapter whose base is missing or ambiguous is listed with the reason. The base is loaded
once, with one engine, and serves its adapters too (inference.engine.lora).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

from inference.engine.adapter_config import AdapterError, is_adapter_folder, read_adapter_config

__all__ = ["inspect_adapter", "is_adapter_folder", "resolve_bases"]


def inspect_adapter(folder) -> None:
    """Fill in a discovered adapter folder (a ``discovery.ModelFolder``): its kind, weights and,
    when it cannot be served on its own terms, the reason; the base is found later
    (``resolve_bases``)."""
    folder.kind = "llm"
    try:
        config = read_adapter_config(folder.path)
    except AdapterError as exc:
        folder.reason = f"LoRA adapter that cannot be served: {exc}"
        return
    folder.adapter = config
    folder.weight_files = [config.weights_file]
    if not config.base:
        folder.reason = "LoRA adapter whose adapter_config.json names no base model"


def resolve_bases(found: Dict[str, object]) -> None:
    """Give every adapter in ``found`` (id -> ModelFolder) its base model's id and config, or
    the reason it has none."""
    models = {i: f for i, f in found.items() if f.adapter is None and f.servable and f.kind == "llm"}
    for folder in found.values():
        if folder.adapter is None or folder.reason is not None:
            continue
        base = folder.adapter.base
        matches = _matches(base, folder.path, models)
        if len(matches) != 1:
            folder.reason = f"LoRA adapter whose base model {base!r} is " + (
                f"ambiguous: it could be any of {', '.join(matches)}"
                if matches
                else "not among the served models (put the base model's folder in a model directory)"
            )
            continue
        base_folder = models[matches[0]]
        if base_folder.vision:
            folder.reason = f"LoRA adapter of a vision-language model ({matches[0]}): not served"
            continue
        folder.base = matches[0]
        folder.config = dict(base_folder.config)


def _matches(base: str, adapter_path: Path, models: Dict[str, object]) -> List[str]:
    candidate = Path(base).expanduser()
    if not candidate.is_absolute():
        candidate = adapter_path.parent / candidate
    by_path = [i for i, f in models.items() if _same(f.path, candidate)]
    if by_path:
        return by_path[:1]
    if base in models:
        return [base]
    name = Path(base).name
    return sorted(i for i in models if i.rsplit("/", 1)[-1] == name) if name else []


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def adapter_bytes(folder) -> Optional[int]:
    """Bytes an adapter's weights take once attached (float32), or None for a model folder."""
    if folder.adapter is None:
        return None
    from .memory import _tensor_bytes

    return _tensor_bytes(folder.adapter.weights_file, "float32")
