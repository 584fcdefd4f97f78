"""The KV format of quantized KV (``kv_bits``, ``kv_group_size``): plain data, no mlx."""

from __future__ import annotations

from dataclasses import dataclass

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class KVQuant:
    """How full-attention KV is quantized: ``bits`` per value, scales and biases per
    ``group_size`` channels."""

    bits: int
    group_size: int = 64

    def __post_init__(self):
        if self.bits not in BITS:
            raise ValueError(f"kv_bits={self.bits!r}: must be one of {', '.join(map(str, BITS))} or null")
        if self.group_size not in GROUP_SIZES:
            raise ValueError(
                f"kv_group_size={self.group_size!r}: must be one of {', '.join(map(str, GROUP_SIZES))}"
            )

    @property
    def tag(self) -> str:
        """``q<bits>g<group>``: in the cache layout's descriptor and the block files."""
        return f"q{self.bits}g{self.group_size}"

    def bytes_per_value(self, dtype_size: int) -> float:
        """Bytes per stored channel: the packed bits plus the group's scale and bias."""
        return self.bits / 8 + 2 * dtype_size / self.group_size
