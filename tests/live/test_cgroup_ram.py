"""RAM as a process in a memory cgroup has it (cache/ram.py): the machine's, or the lowest cgroup
limit over the process. The pool's default limits (--max-model-memory 80%, --max-process-memory
auto), the hot tier's "10%" and the memory guard's cgroup bound all come from that one reading.

Two layers: cgroup file trees written to a temporary folder (the shapes the kernel writes: v2
nested limits, v1 hierarchical limits, a container that mounts only its own cgroup), and a real
cgroup made for a child process and a live `omlx serve` (tests/support/memory_limit.py; skipped with the
reason where no memory cgroup can be made).
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cache import ram
from inference.pool import memory_reading
from tests.support.server import ServerProcess
from tests.support.memory_limit import MemoryLimit

GiB = 2**30
LIMIT = 2 * GiB  # far below this machine's RAM, far above what an idle server uses
ROOT = Path(__file__).resolve().parents[2]


def write(folder: Path, **files) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)
    return folder


def v2(folder: Path, limit: str, current: int, inactive: int = 0) -> Path:
    return write(
        folder,
        memory_max=limit,
        memory_current=str(current),
        memory_stat=f"anon {current}\ninactive_file {inactive}\n",
    )


def proc_cgroup(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return str(path)


# -- file trees ----------------------------------------------------------------------------------


def test_a_parent_limit_applies_to_a_child_without_one(tmp_path):
    mount = tmp_path / "fs"
    mount.mkdir()
    v2(mount / "slice", str(3 * GiB), GiB)
    v2(mount / "slice" / "job", "max", GiB // 2)
    proc = proc_cgroup(tmp_path, "0::/slice/job\n")
    assert ram.total_ram(mount, proc) == 3 * GiB
    level = ram.cgroup_memory(mount, proc)
    assert (level.folder, level.used, level.limit) == (mount / "slice", GiB, 3 * GiB)


def test_the_tightest_of_nested_limits(tmp_path):
    mount = tmp_path / "fs"
    mount.mkdir()
    v2(mount / "a", str(4 * GiB), int(3.5 * GiB))  # half a GiB left, shared with siblings
    v2(mount / "a" / "b", str(2 * GiB), GiB, inactive=GiB // 4)  # 1.25 GiB left
    proc = proc_cgroup(tmp_path, "0::/a/b\n")
    assert ram.total_ram(mount, proc) == 2 * GiB  # the lowest limit
    assert ram.cgroup_memory(mount, proc).folder == mount / "a"  # the least room: OOM acts there first
    bound = memory_reading.cgroup_bound(mount, proc)
    assert (bound.source, bound.used, bound.limit) == ("cgroup", int(3.5 * GiB), 4 * GiB)
    v2(mount / "a" / "b", str(2 * GiB), GiB)
    assert ram.cgroup_levels(mount, proc)[0].used == GiB  # inactive file pages are not counted


def test_no_limit_is_the_machines_ram(tmp_path):
    mount = tmp_path / "fs"
    v2(mount / "a", "max", GiB)
    proc = proc_cgroup(tmp_path, "0::/a\n")
    assert ram.total_ram(mount, proc) == ram.physical_ram()
    assert ram.cgroup_memory(mount, proc) is None and memory_reading.cgroup_bound(mount, proc) is None
    huge = 1 << 50  # a limit above the machine's RAM does not raise it
    v2(mount / "a", str(ram.physical_ram() + huge), GiB)
    assert ram.total_ram(mount, proc) == ram.physical_ram()
    assert ram.total_ram(tmp_path / "nowhere", str(tmp_path / "no-such-file")) == ram.physical_ram()


def test_a_container_that_mounts_only_its_own_cgroup(tmp_path):
    """/proc/self/cgroup names the host's path, the mount is the container's cgroup itself."""
    mount = tmp_path / "fs"
    v2(mount, str(GiB), GiB // 8)
    proc = proc_cgroup(tmp_path, "0::/system.slice/docker-0123abcd.scope\n")
    assert ram.total_ram(mount, proc) == GiB
    v2(mount, str(GiB), GiB // 8)
    assert ram.total_ram(mount, proc_cgroup(tmp_path, "0::/\n")) == GiB  # with a cgroup namespace


def test_cgroup_v1_hierarchical_limit(tmp_path):
    mount = tmp_path / "fs"
    folder = write(
        mount / "memory" / "batch" / "job",
        memory_limit_in_bytes="9223372036854771712",
        memory_usage_in_bytes=str(GiB),
        memory_stat=f"cache 0\nhierarchical_memory_limit {3 * GiB}\ntotal_inactive_file {GiB // 2}\n",
    )
    proc = proc_cgroup(tmp_path, "12:pids:/batch/job\n4:memory:/batch/job\n0::/\n")
    assert ram.total_ram(mount, proc) == 3 * GiB
    level = ram.cgroup_memory(mount, proc)
    assert (level.folder, level.used, level.limit) == (folder, GiB // 2, 3 * GiB)


def test_percentages_and_defaults_are_taken_of_the_same_reading(monkeypatch):
    from cache import sizes
    from inference.pool import memory

    monkeypatch.setattr(ram, "cgroup_levels", lambda *a: [ram.CgroupMemory(Path("/x"), 0, 10 * GiB)])
    assert sizes.parse_size("10%") == GiB
    assert memory.parse_limit("80%", "max_model_memory") == 8 * GiB
    assert memory.auto_process_limit() == 5 * GiB  # at least half: 10 GiB less 8 is less


# -- a real cgroup ------------------------------------------------------------------------------

CHILD = (
    "import json, sys; sys.path.insert(0, {root!r}); "
    "from cache import ram, sizes; from inference.pool import memory, memory_reading; "
    "b = memory_reading.cgroup_bound(); "
    "print(json.dumps([ram.total_ram(), sizes.parse_size('80%'), memory.auto_process_limit(), "
    "b and b.limit]))"
)


@pytest.fixture
def cgroup():
    limit = MemoryLimit(LIMIT)
    if limit.folder is None:
        limit.close()
        pytest.skip(
            "no memory cgroup can be made here (needs a writable cgroup v2 with the memory "
            "controller, or cgroup v1's memory hierarchy)"
        )
    if ram.physical_ram() <= LIMIT:
        limit.close()
        pytest.skip(f"this machine has no more RAM than the test's limit ({LIMIT >> 20} MiB)")
    print(f"memory limit: {limit.kind}, {LIMIT >> 20} MiB")
    yield limit
    limit.close()


def test_a_process_in_a_cgroup_sees_its_limit_as_ram(cgroup):
    import json

    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=cgroup.preexec,
    )
    assert out.returncode == 0, out.stderr
    total, eighty, auto, guard = json.loads(out.stdout)
    assert total == LIMIT and guard == LIMIT
    assert eighty == int(0.8 * LIMIT) and auto == LIMIT // 2


def test_a_server_in_a_cgroup_takes_its_limits_of_the_cgroup(cgroup, tmp_path, model_dir):
    models = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    server = ServerProcess(["--model-dir", str(models)], tmp_path / "home", preexec_fn=cgroup.preexec)
    try:
        response = httpx.post(
            server.url + "/v1/chat/completions",
            timeout=120,
            json={"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert response.status_code == 200, response.text
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
        found = dict(re.findall(r"^omlx_(model|process)_memory_limit_bytes (\S+)$", metrics, re.M))
        assert float(found["model"]) == int(0.8 * LIMIT)  # --max-model-memory 80%
        assert float(found["process"]) == LIMIT // 2  # --max-process-memory auto
        rows = httpx.get(server.url + "/v1/cache/status", timeout=30).json()["data"]
        assert [row["hot"]["capacity_bytes"] for row in rows] == [int(0.1 * LIMIT)]  # 10% hot tier
    finally:
        server.stop()
