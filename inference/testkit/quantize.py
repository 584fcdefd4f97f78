"""MLX-format quantized copies of model folders, with mlx-lm's converter (needs mlx-lm only)."""

from pathlib import Path


def quantize_model(src, dst, bits=4, group_size=64, dtype=None) -> Path:
    """Write an MLX-format quantized copy of the model folder ``src`` to ``dst`` (which must not
    exist) and return ``dst`` as a Path, as ``mlx_lm.convert --quantize`` does: weights in
    mlx-lm's naming (after its ``sanitize``), every Linear and Embedding whose input size is a
    multiple of ``group_size`` packed to ``bits`` bits (uint32, with per-group scales and biases;
    routers and other layers kept as the model's ``quant_predicate`` says), and config.json's
    ``quantization`` entry. ``dtype`` is that of the unquantized tensors (default: as stored).
    """
    from mlx_lm.convert import convert

    if bits not in (2, 3, 4, 5, 6, 8):
        raise ValueError(f"bits must be 2, 3, 4, 5, 6 or 8, got {bits!r}")
    convert(str(src), str(dst), quantize=True, q_bits=bits, q_group_size=group_size, dtype=dtype)
    return Path(dst)
