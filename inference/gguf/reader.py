"""A GGUF file as MLX's reader returns it: metadata as plain Python values, tensors as MLX arrays.

``mx.load(path, return_metadata=True)`` keeps Q4_0, Q4_1 and Q8_0 tensors quantized: each comes
back as ``name`` (packed uint32), ``name.scales`` and ``name.biases`` (float16), MLX's affine format
with 32-value groups (Q8_0's symmetric ``d * q`` is ``d * (q + 128) - 128 * d``, exact in float16).
F32 stays float32; F16 comes back as float16, and so does BF16 (whose range float16 lacks: it is
read again by gguf-py, as float32). It also dequantizes some K-quants to
float16, but not all correctly: in mlx 0.32.4 its Q4_K decoding differs from llama.cpp's in every
odd 32-value sub-block (checked against gguf-py's reference ``dequantize``), and Q3_K, Q5_K,
Q5_0, Q5_1 and the IQ types make the whole file unreadable. So every tensor of a type other
than the ones MLX maps exactly is dequantized again with gguf-py (llama.cpp's own Python
package, the ``gguf`` dependency) from the same bytes, and a file MLX cannot open is read
whole by gguf-py, every tensor dequantized to float32 (a type gguf-py cannot read is refused,
named).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict

import mlx.core as mx

QUANT_SUFFIXES = (".scales", ".biases")
# GGML types MLX's reader returns exactly (quantized ones as MLX affine triples).
MLX_EXACT = {"F32", "F16", "Q4_0", "Q4_1", "Q8_0"}  # not BF16: MLX makes it float16


class GgufImportError(ValueError):
    """A GGUF file that cannot become a servable folder; the message says why."""


@dataclass
class GgufFile:
    """The file's metadata (``general.*``, ``{arch}.*``, ``tokenizer.ggml.*``) and its tensors by
    GGUF name (``blk.0.attn_q.weight``; a quantized one also ``.scales`` and ``.biases``)."""

    path: Path
    metadata: Dict[str, Any]
    tensors: Dict[str, mx.array]
    types: Dict[str, str]  # GGUF tensor name -> GGML type name ("Q4_1", "F32", "Q4_K"...)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def key(self, name: str, default: Any = None) -> Any:
        """``{arch}.name`` (``block_count``, ``attention.head_count``...)."""
        return self.metadata.get(f"{self.architecture}.{name}", default)

    def require(self, name: str) -> Any:
        value = self.key(name)
        if value is None:
            raise GgufImportError(f"{self.path.name}: the GGUF key {self.architecture}.{name} is missing")
        return value

    def quantized(self, name: str) -> bool:
        """Whether the tensor ``name`` (``blk.0.attn_q.weight``) came back as MLX quantized."""
        return name.endswith(".weight") and f"{name[: -len('.weight')]}.scales" in self.tensors


def read(path: Path) -> GgufFile:
    path = Path(path)
    if not path.is_file():
        raise GgufImportError(f"{path}: no such file")
    reader = _checked(path)  # MLX's C reader trusts the header's counts: a crafted one crashes it
    try:
        tensors, metadata = mx.load(str(path), format="gguf", return_metadata=True)
    except Exception:  # MLX's reader says "failed" for types it does not know
        return _read_with_gguf_py(path, reader)
    types = _redo_with_gguf_py(reader, tensors)
    return GgufFile(path, {k: _plain(v) for k, v in metadata.items()}, tensors, types)


def _checked(path: Path):
    """gguf-py's reader of the file (bounds-checked Python: every count, offset and size of the
    header against the file), GgufImportError for a file it cannot read whole."""
    from gguf import GGUFReader

    try:
        return GGUFReader(str(path))
    except Exception as exc:
        raise GgufImportError(f"{path.name}: not a GGUF file ({exc})") from exc


def _read_with_gguf_py(path: Path, reader) -> GgufFile:
    """The whole file through gguf-py, every tensor dequantized to float32 (for files with types
    MLX's reader cannot open: Q3_K, Q5_K, Q5_0, Q5_1, ...)."""
    from gguf import dequantize

    metadata = {
        name: _plain(field.contents())
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.")
    }
    tensors, types = {}, {}
    for tensor in reader.tensors:
        types[tensor.name] = tensor.tensor_type.name
        tensors[tensor.name] = _dequantized(tensor, dequantize)
    return GgufFile(path, metadata, tensors, types)


def _dequantized(tensor, dequantize) -> mx.array:
    shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as exc:
        raise GgufImportError(f"tensor {tensor.name}: type {tensor.tensor_type.name} cannot be read") from exc
    return mx.array(values.reshape(shape).astype("float32"))


def _redo_with_gguf_py(reader, tensors: Dict[str, mx.array]) -> Dict[str, str]:
    """Each tensor's GGML type; tensors of types outside MLX_EXACT replaced (in ``tensors``) by
    gguf-py's float32 dequantization of the same bytes."""
    from gguf import dequantize

    types = {}
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        types[tensor.name] = kind
        if kind not in MLX_EXACT:
            tensors[tensor.name] = _dequantized(tensor, dequantize)
    return types


def _plain(value: Any) -> Any:
    if isinstance(value, mx.array):
        return value.item() if value.ndim == 0 else value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value
