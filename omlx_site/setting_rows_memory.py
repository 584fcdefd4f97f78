"""The rows of the settings table about memory: how much the models and the whole process may
take, and the memory guard that refuses new work near the limit (docs/models.md). Placed in
the table (omlx_site/setting_table.py) where ``*MEMORY`` stands."""

from __future__ import annotations

from omlx_site import setting_checks as checks
from omlx_site.setting_kinds import BOOLEAN, MEMORY_LIMIT, NUMBER
from omlx_site.setting_row import BOTH, Setting

MEMORY: tuple[Setting, ...] = (
    Setting(
        "max_model_memory",
        "OMLX_MAX_MODEL_MEMORY",
        MEMORY_LIMIT,
        "80%",
        "memory for loaded models (weights + KV cache + hot cache, estimated before loading): "
        "32GB, 80% of RAM (the memory cgroup's limit when lower), or 'disabled'",
        flag="--max-model-memory",
        commands=BOTH,
        check=checks.memory_limit(auto=False),
        applies="now",
    ),
    Setting(
        "max_process_memory",
        "OMLX_MAX_PROCESS_MEMORY",
        MEMORY_LIMIT,
        "auto",
        "limit on the whole process when loading a model: a size, a percentage of RAM, 'auto' "
        "(RAM minus 8 GiB, at least half of RAM) or 'disabled'",
        flag="--max-process-memory",
        commands=BOTH,
        check=checks.memory_limit(auto=True),
        applies="now",
    ),
    Setting(
        "memory_guard",
        "OMLX_MEMORY_GUARD",
        BOOLEAN,
        True,
        "watch memory while serving (the process's cgroup, RLIMIT_AS/RLIMIT_DATA, the system's "
        "available memory, --max-process-memory) and relieve pressure before the OS kills the "
        "process (docs/models.md)",
        flag="--memory-guard",
        commands=BOTH,
    ),
    Setting(
        "memory_guard_high",
        "OMLX_MEMORY_GUARD_HIGH",
        NUMBER,
        0.9,
        "share of the tightest memory limit in use from which new requests get a 503 with "
        "Retry-After and engines admit no more waiting requests",
        flag="--memory-guard-high",
        commands=BOTH,
        check=checks.fraction,
        metavar="SHARE",
    ),
    Setting(
        "memory_guard_critical",
        "OMLX_MEMORY_GUARD_CRITICAL",
        NUMBER,
        0.95,
        "share from which, one step per poll, running requests are preempted, then hot tiers "
        "halved, then idle unpinned models unloaded (at least --memory-guard-high)",
        flag="--memory-guard-critical",
        commands=BOTH,
        check=checks.fraction,
        metavar="SHARE",
    ),
    Setting(
        "memory_guard_interval",
        "OMLX_MEMORY_GUARD_INTERVAL",
        NUMBER,
        0.25,
        "seconds between two readings of the memory guard",
        flag="--memory-guard-interval",
        commands=BOTH,
        check=checks.positive,
        metavar="SECONDS",
    ),
)
