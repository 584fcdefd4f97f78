"""Finding model folders in the model directories, and saying what each one is.

Rules (docs/models.md says the same for users):

- Every directory is searched at depth 1 (``DIR/name`` -> id ``name``) and depth 2
  (``DIR/org/name`` -> id ``org/name``). A depth-1 folder with a ``config.json`` is a model
  folder; one without is an organisation folder whose sub-folders are searched. Hidden folders
  (``.name``) are skipped. With several directories the first one that has an id wins; the
  later folder is listed as shadowed.
- A model folder is servable when its config.json is valid JSON with a ``model_type``, its
  weights are ``*.safetensors``, it has a tokenizer (for an embedding or reranker folder, the
  fast tokenizer file ``tokenizer.json``) and omlx can run the architecture: mlx-lm
  knows it (LLMs, and LLM-based embedders and rerankers; the config as
  ``inference.engine.config_compat`` maps transformers 5's keys, whose refusal is the
  reason shown), or it is a BERT-family encoder
  (``inference.embedding.BERT_MODEL_TYPES``) for an embedding or reranker folder. A
  vision-language model of ``inference.vision.model.IMAGE_FAMILIES`` is served with images
  through mlx-vlm; other checkpoints with a ``vision_config`` that mlx-lm reads are served as
  text models. Folders with GGUF or PyTorch ``.bin`` weights only, or none, are listed with
  the reason; so is a ``.gguf`` file directly in a model directory (id: its name less
  ``.gguf``): ``omlx import`` (inference.gguf) makes either a servable folder.
- Kind: ``reranker`` when an architecture ends in ``ForSequenceClassification``; ``embedding``
  when the folder is a sentence-transformers model (``modules.json`` or
  ``config_sentence_transformers.json``: Qwen3-Embedding is one although its architecture is a
  causal LM); a causal LM whose id says ``rerank`` is a ``reranker`` and one whose id says
  ``embedding`` an ``embedding`` model (Qwen3-Reranker and MLX conversions of Qwen3-Embedding
  have nothing else that tells them from a chat model); other causal LMs are ``llm``; bare
  encoder ``...Model`` classes (``BertModel``) or encoder model types are ``embedding``; else
  ``llm``. A per-model ``model_type`` setting overrides the kind.
- A LoRA adapter folder (``adapter_config.json`` without ``config.json``: mlx_lm.lora's or
  PEFT's files) is an ``llm`` served over its base model, found among the servable models
  (``adapters``); ``base`` names it, ``config`` is the base's.
- The Hugging Face cache (``hf_cache``, see ``hf_cache``) comes after every model directory: its
  models are ``ORG/NAME`` at the snapshot of ``refs/main``; a model directory's folder of the same
  id shadows it.
- Then other apps' models (``other_apps``): LM Studio's folders, inspected as above, and GGUF files
  of LM Studio and Ollama, listed to import (not servable). Each folder says its ``origin``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from inference.embedding import BERT_MODEL_TYPES
from inference.gguf import importable_reason

from . import hf_cache, other_apps
from .adapters import inspect_adapter, is_adapter_folder, resolve_bases
from .other_apps import HF_CACHE, MODEL_DIR, OtherApps

from .file_facts import mtime_ns
from .file_facts import size as file_size

logger = logging.getLogger("omlx.models")

KINDS = ("llm", "embedding", "reranker")
_ENCODER_TYPES = {
    "bert",
    "roberta",
    "xlm-roberta",
    "distilbert",
    "electra",
    "mpnet",
    "deberta",
    "deberta-v2",
    "nomic_bert",
    "modernbert",
    "camembert",
    "e5",
}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")


@dataclass
class ModelFolder:
    """One folder found in a model directory. ``reason`` is None exactly when it is servable."""

    id: str
    path: Path
    kind: Optional[str]  # "llm" | "embedding" | "reranker" | None (not a readable model)
    reason: Optional[str]
    config: dict = field(default_factory=dict, repr=False)
    size_bytes: int = 0  # every file in the folder
    weight_files: List[Path] = field(default_factory=list, repr=False)  # *.safetensors
    base: Optional[str] = None  # a LoRA adapter's base model id (adapters.resolve_bases)
    adapter: Any = field(default=None, repr=False)  # a LoRA adapter's AdapterConfig, else None
    origin: str = MODEL_DIR  # or other_apps.HF_CACHE, LMSTUDIO, OLLAMA
    gguf: Optional[Path] = None  # a GGUF file to import (then not servable as it is)

    @property
    def servable(self) -> bool:
        return self.reason is None

    @property
    def vision(self) -> bool:
        """A vision-language model served with images (through mlx-vlm, inference.vision)."""
        from inference.vision.model import reads_images

        return reads_images(self.config, self.path)


def discover(
    dirs: Iterable[Path],
    kind_overrides: Optional[Dict[str, str]] = None,
    hf_cache_dir: Optional[Path] = None,
    apps: Optional[OtherApps] = None,
) -> Dict[str, ModelFolder]:
    """Every model folder in ``dirs``, then the Hugging Face cache, then other apps' models
    (``apps``), servable or not, by id (sorted)."""
    kind_overrides = kind_overrides or {}
    found: Dict[str, ModelFolder] = {}
    candidates = [
        (i, p, None, MODEL_DIR, None) for root in dirs for i, p in _candidates(Path(root).expanduser())
    ]
    candidates += [(i, p, r, HF_CACHE, None) for i, p, r in hf_cache.snapshots(hf_cache_dir)]
    candidates += [(c.id, c.path, None, c.origin, c.gguf) for c in other_apps.candidates(apps)]
    for model_id, path, reason, origin, gguf in candidates:
        key = f"{model_id}@{path}" if model_id in found else model_id
        if key != model_id:
            folder = ModelFolder(model_id, path, None, f"shadowed by {found[model_id].path} (same id)")
        elif gguf is not None:
            folder = ModelFolder(model_id, path, "llm", other_apps.IMPORT_REASON, size_bytes=file_size(gguf))
        else:
            folder = inspect(model_id, path, kind_overrides.get(model_id))
            folder.reason = reason or folder.reason
        folder.origin, folder.gguf = origin, gguf
        if origin == MODEL_DIR and key == model_id and path.suffix == ".gguf" and path.is_file():
            folder.gguf = path  # a loose GGUF file: the Models page's Import converts it too
        found[key] = folder
    resolve_bases(found)
    return dict(sorted(found.items()))


def signature(
    dirs: Iterable[Path], hf_cache_dir: Optional[Path] = None, apps: Optional[OtherApps] = None
) -> Tuple:
    """Changes when a model folder appears, disappears or changes (folder mtimes, depth <= 2),
    or a model of the Hugging Face cache or of another app does."""
    parts = [hf_cache.signature(hf_cache_dir), other_apps.signature(apps)]
    for root in dirs:
        root = Path(root).expanduser()
        parts.append((str(root), mtime_ns(root)))
        for child in _subdirs(root):
            parts.append((str(child), mtime_ns(child)))
            if not (child / "config.json").exists():
                parts.extend((str(g), mtime_ns(g)) for g in _subdirs(child))
    return tuple(parts)


def inspect(model_id: str, path: Path, kind_override: Optional[str] = None) -> ModelFolder:
    if path.suffix == ".gguf" and path.is_file():
        return ModelFolder(model_id, path, None, importable_reason(path), {}, file_size(path))
    files = [p for p in path.iterdir() if p.is_file()] if path.is_dir() else []
    size = sum(file_size(p) for p in files)
    weights = sorted(p for p in files if p.suffix == ".safetensors")
    folder = ModelFolder(model_id, path, None, None, {}, size, weights)
    if is_adapter_folder(path):
        inspect_adapter(folder)
        return folder
    gguf = sorted(p for p in files if p.suffix == ".gguf")
    if gguf and not weights:
        folder.reason = importable_reason(gguf[0])
        return folder
    if not (path / "config.json").is_file():
        folder.reason = "no config.json, so this is not a model folder"
        return folder
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        folder.reason = f"config.json cannot be read: {exc}"
        return folder
    if not isinstance(config, dict):
        folder.reason = "config.json is not a JSON object"
        return folder
    folder.config = config
    folder.kind = kind_override or classify(path, config, model_id)
    if not weights:
        if any(p.suffix in (".bin", ".pth", ".pt") for p in files):
            folder.reason = "PyTorch .bin weights only: convert them to safetensors"
        else:
            folder.reason = "no weights (*.safetensors) in the folder"
        return folder
    if not isinstance(config.get("model_type"), str):
        folder.reason = 'config.json has no "model_type"'
        return folder
    if not any((path / name).exists() for name in _TOKENIZER_FILES + ("vocab.txt",)):
        folder.reason = "no tokenizer (tokenizer.json or tokenizer.model)"
        return folder
    if folder.kind != "llm" and not (path / "tokenizer.json").exists():
        folder.reason = f"no tokenizer.json: {folder.kind} models need the fast tokenizer file"
        return folder
    from inference.vision.model import is_vision_config, unsupported_reason

    if folder.kind == "llm" and (
        folder.vision or (not _mlx_lm_supports(config) and is_vision_config(config))
    ):
        folder.reason = unsupported_reason(config)
    else:
        folder.reason = _unsupported(folder.kind, config)
    return folder


def _unsupported(kind: str, config: dict):
    """Why omlx cannot run a ``kind`` model with this config, or None."""
    model_type = config["model_type"]
    if kind != "llm" and model_type in BERT_MODEL_TYPES:
        architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
        if kind == "reranker" and not any(a.endswith("ForSequenceClassification") for a in architectures):
            return "a BERT-family reranker needs a ...ForSequenceClassification architecture"
        return None
    if kind != "llm" and model_type in _ENCODER_TYPES:
        return (
            f"encoder model_type {model_type!r} is not supported for {kind} models "
            f"(omlx runs {', '.join(BERT_MODEL_TYPES)} and LLM-based ones)"
        )
    from inference.engine.config_compat import ConfigError, for_mlx_lm

    try:
        config = for_mlx_lm(config)  # transformers 5's keys, as loading maps them
    except ConfigError as exc:
        return str(exc)
    if not _mlx_lm_supports(config):
        return f"model_type {model_type!r} is not supported by the installed mlx-lm"
    return None


def classify(path: Path, config: dict, model_id: str = "") -> str:
    """The kind by the rules of the module docstring (``model_id``: the id, whose wording
    marks LLM-based rerankers and embedders)."""
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return "reranker"
    if (path / "modules.json").exists() or (path / "config_sentence_transformers.json").exists():
        return "embedding"
    if any(a.endswith(("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")) for a in architectures):
        name = (model_id or path.name).lower()
        return "reranker" if "rerank" in name else "embedding" if "embedding" in name else "llm"
    if any(a.endswith("Model") for a in architectures) or config.get("model_type") in _ENCODER_TYPES:
        return "embedding"
    return "llm"


def _mlx_lm_supports(config: dict) -> bool:
    try:
        from mlx_lm.utils import _get_classes

        _get_classes(config)
        return True
    except Exception:  # ValueError for an unknown model_type; anything else is as bad
        return False


def _candidates(root: Path):
    for child in _subdirs(root):
        if (child / "config.json").exists() or is_adapter_folder(child):
            yield child.name, child
            continue
        nested = [g for g in _subdirs(child) if (g / "config.json").exists() or _has_weights(g)]
        for grandchild in nested:
            yield f"{child.name}/{grandchild.name}", grandchild
        if not nested and _has_weights(child):
            yield child.name, child  # weights without config.json: listed with the reason
    for path in _gguf_files(root):
        yield path.name[: -len(".gguf")], path


def _gguf_files(root: Path) -> List[Path]:
    try:
        return sorted(
            p for p in root.iterdir() if p.suffix == ".gguf" and p.is_file() and not p.name.startswith(".")
        )
    except OSError:
        return []


def _has_weights(path: Path) -> bool:
    try:
        return any(p.suffix in (".safetensors", ".gguf", ".bin") for p in path.iterdir())
    except OSError:
        return False


def _subdirs(path: Path) -> List[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
