"""Byte sizes as people write them: 1073741824, "512MB", "4GiB", "10%" (of RAM: the machine's, or
its memory cgroup's limit when lower, `cache.ram.total_ram`)."""

from __future__ import annotations

import re
from typing import Union

from .ram import total_ram

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
}


def parse_size(value: Union[int, str], name: str = "size") -> int:
    """Bytes for an int or a string like "512MB", "4GiB" or "10%" (of total RAM)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name}={value!r}: must be >= 0")
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.endswith("%"):
            try:
                percent = float(text[:-1])
            except ValueError:
                percent = -1
            if not 0 <= percent <= 100:
                raise ValueError(f"{name}={value!r}: a percentage must be in [0, 100]")
            return int(total_ram() * percent / 100)
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", text)
        if match and match.group(2) in _UNITS:
            return int(float(match.group(1)) * _UNITS[match.group(2)])
    raise ValueError(f'{name}={value!r}: expected bytes, e.g. 1073741824, "512MB", "4GiB" or "10%"')
