"""How much memory this process may still use before the OS stops it, read from every limit
that applies (the memory guard's input, ``memory_guard``).

Each limit is a `Bound`: what is counted against it now, and where the OS acts.

    cgroup          the memory cgroup of this process or an ancestor's, the one with the least
                    room (v2: memory.max / memory.current; v1: memory.limit_in_bytes or
                    hierarchical_memory_limit / memory.usage_in_bytes), less its inactive file
                    pages (page cache the kernel reclaims before it kills): the OOM killer acts
                    here. Read by cache/ram.py, whose ``total_ram()`` (the lowest cgroup limit,
                    else physical RAM) is what the pool's default limits and every "% of RAM"
                    are taken of.
    rlimit-as       RLIMIT_AS against the process's virtual size (VmSize): allocations fail.
    rlimit-data     RLIMIT_DATA against its data segment (VmData): allocations fail.
    system          MemTotal less MemAvailable against MemTotal (Linux /proc/meminfo, else
                    psutil's figures: macOS): the system OOM killer or swap storms.
    mlx             Apple silicon: MLX's active and cached buffers against the GPU's recommended
                    working set.
    process         --max-process-memory against the resident size (omlx's own limit).

`read()` returns the bound with the least room; a bound that cannot be read (no cgroup limit,
no rlimit, another OS) is left out. Every read is a few small files, cheap enough to poll.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional

from cache.ram import CGROUP_ROOT, PROC_CGROUP, cgroup_memory

from .memory import process_rss


@dataclass(frozen=True)
class Bound:
    """One limit: ``used`` of ``limit`` bytes, as that limit counts them."""

    source: str
    used: int
    limit: int

    @property
    def ratio(self) -> float:
        return self.used / self.limit if self.limit else 1.0

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)


def read(process_limit: Optional[int] = None) -> Optional[Bound]:
    """The tightest bound now (highest used/limit), or None when no limit can be read."""
    bounds = all_bounds(process_limit)
    return max(bounds, key=lambda b: b.ratio) if bounds else None


def all_bounds(process_limit: Optional[int] = None) -> List[Bound]:
    out = []
    readers: List[Callable[[], Optional[Bound]]] = [
        cgroup_bound,
        rlimit_as_bound,
        rlimit_data_bound,
        system_bound,
        mlx_bound,
    ]
    for reader in readers:
        try:
            bound = reader()
        except Exception:  # one limit that cannot be read must not hide the others
            bound = None
        if bound is not None:
            out.append(bound)
    if process_limit is not None:
        rss = process_rss()
        if rss is not None:
            out.append(Bound("process", rss, process_limit))
    return out


def cgroup_bound(root: Path = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> Optional[Bound]:
    """The memory cgroup over this process with the least room (its own or an ancestor's limit,
    ``cache.ram``, which the pool's default limits are taken of too)."""
    level = cgroup_memory(root, proc_cgroup)
    return None if level is None else Bound("cgroup", level.used, level.limit)


def rlimit_as_bound() -> Optional[Bound]:
    return _rlimit(resource.RLIMIT_AS, "VmSize", "rlimit-as")


def rlimit_data_bound() -> Optional[Bound]:
    return _rlimit(resource.RLIMIT_DATA, "VmData", "rlimit-data")


def _rlimit(which: int, field: str, source: str) -> Optional[Bound]:
    soft, _ = resource.getrlimit(which)
    if soft == resource.RLIM_INFINITY:
        return None
    used = _status_field(field)
    return None if used is None else Bound(source, used, soft)


def system_bound(meminfo: str = "/proc/meminfo") -> Optional[Bound]:
    """The machine's RAM: what is not available of it."""
    try:
        fields = {}
        for line in Path(meminfo).read_text().splitlines():
            key, _, rest = line.partition(":")
            fields[key] = int(rest.split()[0]) * 1024
        return Bound("system", fields["MemTotal"] - fields["MemAvailable"], fields["MemTotal"])
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        import psutil  # macOS and other systems without /proc/meminfo
    except ImportError:
        return None
    vm = psutil.virtual_memory()
    return Bound("system", vm.total - vm.available, vm.total)


def mlx_bound() -> Optional[Bound]:
    """Apple silicon: MLX's live and cached buffers against the GPU's recommended working set
    (unified memory beyond it pages, then the system kills). None on CPU-only builds."""
    import mlx.core as mx

    metal = getattr(mx, "metal", None)
    if metal is None or not metal.is_available():
        return None
    limit = int(metal.device_info().get("max_recommended_working_set_size") or 0)
    if not limit:
        return None
    return Bound("mlx", mx.get_active_memory() + mx.get_cache_memory(), limit)


def _status_field(name: str) -> Optional[int]:
    try:
        with open(f"/proc/{os.getpid()}/status") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
