"""How much RAM this process has: the machine's physical memory, or less when the process runs
in a memory cgroup (a container, a systemd slice, a job scheduler) whose limit is lower.

Every "percentage of RAM" and every default memory limit is taken of `total_ram()`, so that in
a container with ``memory.max`` of 8 GiB on a 64 GiB machine the pool's "80%" means 6.4 GiB,
not 51 GiB that the kernel's OOM killer would never let the process reach. The memory guard
reads the same cgroup through `cgroup_memory()` (inference/pool/memory_reading.py): one
reading, two uses.

Which cgroup: the memory cgroup named in /proc/self/cgroup, and its ancestors (a limit set on
a parent, e.g. a slice or the container's own cgroup above a nested one, applies as well):

    v2  every folder from the process's own up to the mount root that has ``memory.max``; used
        = ``memory.current`` less ``inactive_file`` of ``memory.stat`` (page cache the kernel
        reclaims before it kills).
    v1  the process's folder of the memory hierarchy: ``memory.limit_in_bytes`` and the
        ``hierarchical_memory_limit`` of its ``memory.stat`` (the tightest limit on the way up);
        used = ``memory.usage_in_bytes`` less ``total_inactive_file``.

When the path named in /proc/self/cgroup is not under the mount (a container without a cgroup
namespace mounts only its own cgroup), the mount root is that cgroup. A limit of "max" (or
cgroup v1's page-rounded 2**63 - 1) is no limit. Reading is a few small files, cheap enough to
poll.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = "/proc/self/cgroup"
UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


@dataclass(frozen=True)
class CgroupMemory:
    """One memory limit of a cgroup: ``used`` of ``limit`` bytes, as the kernel counts them."""

    folder: Path
    used: int
    limit: int

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)


def physical_ram() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def total_ram(root: Path = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> int:
    """The machine's RAM, or the lowest memory cgroup limit over this process when lower."""
    limits = [level.limit for level in cgroup_levels(root, proc_cgroup)]
    return min([physical_ram(), *limits])


def cgroup_memory(root: Path = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> Optional[CgroupMemory]:
    """The cgroup limit with the least room left (where the OOM killer acts first), or None
    when no memory cgroup over this process has a limit."""
    levels = cgroup_levels(root, proc_cgroup)
    return min(levels, key=lambda level: level.free) if levels else None


def cgroup_levels(root: Path = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> List[CgroupMemory]:
    """Every limited memory cgroup over this process (see the module docstring); [] when none
    can be read (no cgroup file system, another OS, no limit)."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return []
    out: List[CgroupMemory] = []
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        try:
            if hierarchy == "0" and controllers == "":
                out += _v2_levels(root, path.strip("/"))
            elif "memory" in controllers.split(","):
                level = _v1_level(root / "memory", path.strip("/"))
                out += [level] if level is not None else []
        except (OSError, ValueError):  # a cgroup removed while read, a file we may not read
            continue
    return out


def _own_folder(mount: Path, rel: str, marker: str) -> Optional[Path]:
    for folder in (mount / rel, mount):
        if (folder / marker).exists():
            return folder
    return None


def _v2_levels(root: Path, rel: str) -> Iterator[CgroupMemory]:
    for mount in (root, root / "unified"):
        folder = _own_folder(mount, rel, "memory.max")
        if folder is None:
            continue
        while (folder / "memory.max").exists():  # the real root has none
            text = (folder / "memory.max").read_text().strip()
            if text != "max" and int(text) < UNLIMITED:
                used = _used(folder, "memory.current", "inactive_file")
                yield CgroupMemory(folder, used, int(text))
            if folder == mount:
                break
            folder = folder.parent
        return


def _v1_level(mount: Path, rel: str) -> Optional[CgroupMemory]:
    folder = _own_folder(mount, rel, "memory.limit_in_bytes")
    if folder is None:
        return None
    limit = int((folder / "memory.limit_in_bytes").read_text())
    hierarchical = _stat(folder).get("hierarchical_memory_limit")
    if hierarchical is not None:
        limit = min(limit, hierarchical)
    if limit >= UNLIMITED:
        return None
    return CgroupMemory(folder, _used(folder, "memory.usage_in_bytes", "total_inactive_file"), limit)


def _used(folder: Path, usage_file: str, inactive_key: str) -> int:
    usage = int((folder / usage_file).read_text())
    return max(0, usage - _stat(folder).get(inactive_key, 0))


def _stat(folder: Path) -> dict:
    out = {}
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
    except OSError:
        pass
    return out
