"""``import_gguf``: one GGUF file -> one MLX model folder that omlx (and mlx-lm) serve.

The folder is written next to its destination under a temporary name and renamed into place at
the end, so it exists whole or not at all. Nothing in the file is executed; the chat template is
stored as text and rendered by the sandboxed Jinja of the tokenizer at serving time, as for any
Hub folder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

import mlx.core as mx

from inference.engine import config_compat

from . import config as gguf_config
from . import reader, tokenizer, weights as gguf_weights
from .reader import GgufImportError

__all__ = ["FORMAT_VERSION", "GgufImportError", "ImportSummary", "import_gguf"]

# The folder's format: bumped whenever import_gguf writes a different folder from the same file,
# so caches of imported folders (the tests' SmolLM2) are rebuilt.
FORMAT_VERSION = 1


@dataclass
class ImportSummary:
    """What became of the file: the lines ``omlx import`` prints."""

    source: Path
    folder: Path
    architecture: str
    source_bytes: int
    folder_bytes: int
    lines: List[str] = field(default_factory=list)


def import_gguf(
    src: Path,
    dest: Path,
    quantize: Optional[int] = None,
    on_summary: Optional[Callable[[ImportSummary], None]] = None,
) -> Path:
    """Write the MLX folder ``dest`` (which must not exist) from the GGUF file ``src`` and return
    it. ``quantize`` (4 or 8) requantizes the tensors that are not kept quantized (see
    ``inference.gguf.weights``). GgufImportError (a ValueError) says why a file cannot be
    imported; ``on_summary`` receives what was done."""
    src, dest = Path(src), Path(dest)
    if quantize not in (None, 4, 8):
        raise GgufImportError(f"--quantize takes 4 or 8, not {quantize}")
    if dest.exists():
        raise GgufImportError(f"{dest} already exists; remove it or choose another --name")
    gguf = reader.read(src)
    config = gguf_config.build_config(gguf)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.importing-"))
    try:
        converted = _write_folder(gguf, config, work, quantize)
        work.rename(dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    summary = ImportSummary(
        src, dest, gguf.architecture, src.stat().st_size, sum(f.stat().st_size for f in dest.iterdir())
    )
    summary.lines = _describe(converted, config)
    if on_summary is not None:
        on_summary(summary)
    return dest


def _write_folder(gguf: reader.GgufFile, config: dict, work: Path, quantize: Optional[int]):
    tokenizer.write_tokenizer(gguf, work)
    converted = gguf_weights.convert(gguf, config, quantize)
    block = gguf_weights.quantization_block(converted)
    if block is not None:
        config["quantization"] = block
        config["quantization_config"] = block
    try:
        config_compat.for_mlx_lm(config)  # the loader's own check, before anything is kept
    except config_compat.ConfigError as exc:
        raise GgufImportError(f"{gguf.path.name}: {exc}") from exc
    (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    mx.save_safetensors(str(work / "model.safetensors"), converted.tensors, metadata={"format": "mlx"})
    return converted


def _describe(converted: gguf_weights.Weights, config: dict) -> List[str]:
    lines = [f"architecture {config['model_type']}, {config['num_hidden_layers']} layers"]
    for kind, n in sorted(converted.kept.items()):
        lines.append(f"{n} {kind} tensors kept as MLX quantized weights (group size 32, exact)")
    for kind, n in sorted(converted.dequantized.items()):
        lines.append(f"{n} {kind} tensors dequantized to float")
    if converted.requantized:
        block = config["quantization"]
        bits = {q["bits"] for k, q in block.items() if isinstance(q, dict)} | {block["bits"]}
        lines.append(
            f"{converted.requantized} float tensors requantized by MLX ({'/'.join(map(str, bits))} bits)"
        )
    return lines
