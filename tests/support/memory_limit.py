"""A real OS memory limit for a test's server process: the tightest kind this machine allows.

``MemoryLimit(limit_bytes)`` makes, in order of preference:

- a cgroup v2 child of this process's own cgroup with ``memory.max`` (where the v2 memory
  controller can be enabled there): the kernel's OOM killer acts at the limit;
- a cgroup v1 memory child of this process's own memory cgroup with ``memory.limit_in_bytes``
  (hybrid hierarchies, as on these test machines): the OOM killer too;
- else RLIMIT_AS on the child (no cgroup is writable): allocations beyond it fail. It counts
  address space, which MLX and the BLAS threads reserve far beyond what they use, so a flood
  test cannot put a server near it the way a cgroup does (tests/live/test_memory_guard_live.py skips
  then; tests/unit/test_memory_guard.py checks the guard reads it).

``kind`` says which; ``preexec()`` is the Popen ``preexec_fn`` that puts the child under it (it
runs in the child before exec, so everything the server allocates is counted); ``oom_kills()``
reads the cgroup's OOM kill count (None for RLIMIT_AS); ``close()`` removes the cgroup once its
processes are gone. The cgroup is a child of the test's own, so it stays inside whatever
accounts for the test run.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Optional

ROOT = Path("/sys/fs/cgroup")


class MemoryLimit:
    def __init__(self, limit_bytes: int, name: Optional[str] = None):
        self.limit = limit_bytes
        self.folder: Optional[Path] = None
        self.kind = "rlimit-as"
        name = name or f"omlx-memguard-{os.getpid()}-{time.monotonic_ns()}"
        for make in (self._cgroup_v2, self._cgroup_v1):
            try:
                if make(name):
                    break
            except OSError:
                self._remove()

    def _own(self, hierarchy: str, controller: str) -> Optional[str]:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if (number == "0" and hierarchy == "v2") or controller in controllers.split(","):
                return path.lstrip("/")
        return None

    def _cgroup_v2(self, name: str) -> bool:
        own = self._own("v2", "")
        if own is None:
            return False
        for base in (ROOT, ROOT / "unified"):
            parent = base / own
            if (parent / "cgroup.controllers").exists() and "memory" in (
                parent / "cgroup.controllers"
            ).read_text().split():
                subtree = parent / "cgroup.subtree_control"
                if "memory" not in subtree.read_text().split():
                    subtree.write_text("+memory")
                self.folder = parent / name
                self.folder.mkdir()
                (self.folder / "memory.max").write_text(str(self.limit))
                if (self.folder / "memory.swap.max").exists():
                    (self.folder / "memory.swap.max").write_text("0")
                self.kind = "cgroup v2"
                self._procs = self.folder / "cgroup.procs"
                return True
        return False

    def _cgroup_v1(self, name: str) -> bool:
        own = self._own("v1", "memory")
        parent = ROOT / "memory" / (own or "")
        if own is None or not (parent / "memory.limit_in_bytes").exists():
            return False
        self.folder = parent / name
        self.folder.mkdir()
        (self.folder / "memory.limit_in_bytes").write_text(str(self.limit))
        self.kind = "cgroup v1"
        self._procs = self.folder / "cgroup.procs"
        return True

    def preexec(self) -> None:
        """In the child, before exec: join the cgroup, or set RLIMIT_AS."""
        if self.folder is not None:
            with open(self._procs, "w") as f:
                f.write(str(os.getpid()))
        else:
            resource.setrlimit(resource.RLIMIT_AS, (self.limit, self.limit))

    def oom_kills(self) -> Optional[int]:
        if self.folder is None:
            return None
        for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
            path = self.folder / name
            if path.exists():
                for line in path.read_text().splitlines():
                    parts = line.split()
                    if parts and parts[0] == key:
                        return int(parts[1])
        return None

    def peak(self) -> Optional[int]:
        """The most the cgroup has held (None without one)."""
        if self.folder is None:
            return None
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            path = self.folder / name
            if path.exists():
                return int(path.read_text())
        return None

    def close(self) -> None:
        self._remove()

    def _remove(self) -> None:
        if self.folder is None:
            return
        for _ in range(100):  # the killed or stopped processes leave the cgroup a moment later
            try:
                self.folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        self.folder = None
