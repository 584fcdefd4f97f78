"""The runtime memory guard: while serving, keep the process clear of the limit where the OS
would kill it (or where its allocations would fail).

A thread reads the tightest memory bound every ``interval`` seconds (``memory_reading``: the
process's cgroup, RLIMIT_AS / RLIMIT_DATA, the system's available memory, MLX's working set on
Apple silicon, --max-process-memory) and sets a level from its used/limit ratio:

    normal    below ``high``: nothing is done.
    high      at or above ``high``: new API requests are refused (HTTP 503 with Retry-After, in
              the OpenAI or Anthropic error shape) and every engine holds its waiting requests
              (one is still admitted when nothing runs, so the most urgent request progresses)
              and gives MLX's freed buffers back. When no request runs, nothing would free
              memory by itself: the steps below are taken as when critical.
    critical  at or above ``critical``: the same, engines run one prefill chunk per step (a step
              that began before the pressure stops early), and at each poll the first step that
              has something to do is taken, in this order:
                1. preempt half of each engine's running requests (never its last one); their KV
                   goes to the prefix cache, their tokens are kept, and they resume later;
                2. halve the hot (RAM) tier of each block cache, its blocks going to the SSD tier;
                3. unload the least recently used idle model that is not pinned.
              The next poll reads memory again before taking the next step.

Embedding and reranker engines hold no KV cache and no running generations: steps 1-2 and the
holding pass them by; step 3 unloads them like any idle model.

A level falls only once the ratio is ``RESUME_MARGIN`` below its threshold (no flapping at the
edge). Back at normal, engines admit again and hot tiers get their configured budget back.
Counts of refused requests, preempted requests, shrinks and unloads go to /metrics and the
console's Status page (``snapshot``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, Optional, Set

from . import memory_reading
from .memory import format_bytes
from .memory_reading import Bound

logger = logging.getLogger("omlx.memory")

NORMAL, HIGH, CRITICAL = 0, 1, 2
LEVEL_NAMES = ("normal", "high", "critical")
RESUME_MARGIN = 0.03
ACTIONS = ("reject", "preempt", "shrink", "unload")


class MemoryPressure(Exception):
    """The guard refuses new requests now: ``str()`` says why, ``retry_after`` in seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class GuardState:
    """What the guard saw at its last poll and what it has done since it started."""

    level: int = NORMAL
    ratio: Optional[float] = None
    used: Optional[int] = None
    limit: Optional[int] = None
    source: Optional[str] = None
    checked_at: Optional[float] = None  # time.time()
    counts: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACTIONS, 0))


class MemoryGuard:
    """Watches memory for one pool (see the module docstring). ``read`` returns the tightest
    `Bound` (or None when no limit can be read): tests pass their own to set the pressure."""

    def __init__(
        self,
        pool,
        high: float = 0.9,
        critical: float = 0.95,
        interval: float = 0.25,
        retry_after: int = 1,
        read: Optional[Callable[[], Optional[Bound]]] = None,
    ):
        if not 0 < high <= critical < 1:
            raise ValueError(f"memory guard thresholds: need 0 < high ({high}) <= critical ({critical}) < 1")
        if interval <= 0:
            raise ValueError(f"memory guard interval {interval}: must be > 0")
        self.pool = pool
        self.high, self.critical, self.interval = high, critical, interval
        self.retry_after = retry_after
        self.read = read or (lambda: memory_reading.read(pool.max_process_memory))
        self.state = GuardState()
        self._lock = threading.Lock()
        self._held: Dict[int, object] = {}  # id(engine) -> engine holding admissions
        self._pending: Set[int] = set()  # id(engine) with a step queued and not done yet
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- the API's question ------------------------------------------------------------------

    def admit(self) -> None:
        """MemoryPressure (counted) when new requests are refused now."""
        with self._lock:
            state = self.state
            if state.level < HIGH:
                return
            state.counts["reject"] += 1
            message = (
                f"The server is short of memory ({state.source}: {format_bytes(state.used)} "
                f"of {format_bytes(state.limit)} in use, {state.ratio:.0%}); new requests are "
                f"refused until it recovers. Retry after {self.retry_after} s"
            )
        raise MemoryPressure(message, self.retry_after)

    # -- the thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="omlx-memory-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception:  # the guard must outlive anything one poll runs into
                logger.exception("memory guard poll failed")
            self._stop.wait(self.interval)

    # -- one poll --------------------------------------------------------------------------------

    def check(self) -> Optional[str]:
        """Read memory, set the level, take at most one relief step; returns the step taken
        ("preempt", "shrink", "unload") or None."""
        bound = self.read()
        level = self._level(bound)
        with self._lock:
            before = self.state.level
            self.state.level = level
            self.state.checked_at = time.time()
            if bound is not None:
                self.state.ratio, self.state.used = bound.ratio, bound.used
                self.state.limit, self.state.source = bound.limit, bound.source
        if level != before:
            logger.warning(
                "memory pressure %s -> %s (%s)", LEVEL_NAMES[before], LEVEL_NAMES[level], _describe(bound)
            )
        engines = self._engines()
        live = {id(e): e for e in engines.values()}
        with self._lock:  # an engine closed meanwhile never runs what was queued on it
            self._pending &= set(live)
        self._held = {key: e for key, e in self._held.items() if live.get(key) is e}
        for engine in engines.values():  # read by the engine between the prefill chunks of a step
            flag = getattr(engine, "memory_critical", None)  # None: an embedding engine (no KV to grow)
            if flag is not None:
                (flag.set if level == CRITICAL else flag.clear)()
        if level == NORMAL:
            self._release(engines)
            return None
        self._hold(engines)
        if level < CRITICAL and any(_running(e) for e in engines.values()):
            return None  # running requests end by themselves; idle, nothing would free memory
        with self._lock:
            pending = bool(self._pending)
        if pending or any(_shedding(e) for e in engines.values()):
            return None  # the last step has not run yet: its effect cannot show
        if self._preempt(engines):
            return "preempt"
        if self._shrink(engines):
            return "shrink"
        if self._unload(engines):
            with self._lock:
                self.state.counts["unload"] += 1
            return "unload"
        return None

    def _level(self, bound: Optional[Bound]) -> int:
        if bound is None:
            return NORMAL
        ratio, current = bound.ratio, self.state.level
        if ratio >= self.critical or (current == CRITICAL and ratio >= self.critical - RESUME_MARGIN):
            return CRITICAL
        if ratio >= self.high or (current >= HIGH and ratio >= self.high - RESUME_MARGIN):
            return HIGH
        return NORMAL

    def _engines(self) -> Dict[str, object]:
        return {i: info["engine"] for i, info in self.pool.loaded_models().items()}

    def _hold(self, engines: Dict[str, object]) -> None:
        for engine in engines.values():
            if id(engine) not in self._held and hasattr(engine, "relieve_memory"):
                _quietly(lambda: engine.relieve_memory("hold"))
                self._held[id(engine)] = engine

    def _release(self, engines: Dict[str, object]) -> None:
        held, self._held = self._held, {}
        for engine in held.values():
            if engine in engines.values():  # unloaded ones are gone
                _quietly(lambda: engine.relieve_memory("end"))

    def _post(self, engine, step: str) -> None:
        """Queue ``step`` on ``engine``; it counts once the engine has done it (until then the
        guard takes no further step: its effect is not measurable yet)."""
        key = id(engine)

        def done(ok: bool, result) -> None:
            with self._lock:
                self._pending.discard(key)
                if ok and result:
                    self.state.counts[step] += result if step == "preempt" else 1
            if ok and result:
                logger.warning(
                    "memory pressure: %s",
                    f"preempted {result} running requests"
                    if step == "preempt"
                    else f"the hot tier let go of {format_bytes(result)}",
                )

        with self._lock:
            self._pending.add(key)
        try:
            engine.relieve_memory(step, done)
        except Exception as exc:  # closed meanwhile
            done(False, exc)

    def _preempt(self, engines: Dict[str, object]) -> int:
        chosen = [e for e in engines.values() if _running(e) > 1]
        for engine in chosen:
            self._post(engine, "preempt")
        return len(chosen)

    def _shrink(self, engines: Dict[str, object]) -> int:
        chosen = [e for e in engines.values() if _hot_bytes(e) > 0]
        for engine in chosen:
            self._post(engine, "shrink")
        return len(chosen)

    def _unload(self, engines: Dict[str, object]) -> int:
        from .pool import ModelBusy

        idle = []
        for model_id, engine in engines.items():
            since = engine.idle_since()
            if since is not None and not self.pool.settings(model_id).get("pinned"):
                idle.append((since, model_id))
        for _, model_id in sorted(idle):
            try:
                if self.pool.unload(model_id, reason="memory"):
                    logger.warning("memory pressure: unloaded %s (idle, not pinned)", model_id)
                    return 1
            except ModelBusy:  # a request arrived meanwhile
                continue
        return 0

    # -- reporting -------------------------------------------------------------------------------

    def snapshot(self) -> dict:
        with self._lock:
            out = asdict(self.state)
        out.update(
            level_name=LEVEL_NAMES[out["level"]],
            high=self.high,
            critical=self.critical,
            interval=self.interval,
            enabled=self.running(),
        )
        return out


def _running(engine) -> int:
    """Running requests, read from another thread: a hint for choosing a step, not a count."""
    return engine.stats().running


def _shedding(engine) -> bool:
    return engine.stats().shedding


def _hot_bytes(engine) -> int:
    return engine.stats().hot_bytes


def _quietly(fn: Callable[[], object]) -> None:
    """Queue a step on an engine; one that closed meanwhile is skipped, not fatal."""
    try:
        fn()
    except Exception as exc:
        logger.warning("memory guard: %s", exc)


def _describe(bound: Optional[Bound]) -> str:
    if bound is None:
        return "no limit can be read"
    return f"{bound.source}: {format_bytes(bound.used)} of {format_bytes(bound.limit)}, {bound.ratio:.1%}"


# -- the process's guard ------------------------------------------------------------------------

_guard: Optional[MemoryGuard] = None
_guard_lock = threading.Lock()


def start_guard(pool=None, read: Optional[Callable[[], Optional[Bound]]] = None) -> Optional[MemoryGuard]:
    """Start the process's guard from settings (OMLX_MEMORY_GUARD and its thresholds) over the
    process's pool; None when it is off. Called where models are served (`omlx serve`, `omlx
    worker`). ``read``: the memory reading (default: this process's limits)."""
    global _guard
    from django.conf import settings

    if not settings.OMLX_MEMORY_GUARD:
        return None
    if pool is None:
        from . import get_pool

        pool = get_pool()
    with _guard_lock:
        if _guard is None:
            _guard = MemoryGuard(
                pool,
                high=settings.OMLX_MEMORY_GUARD_HIGH,
                critical=settings.OMLX_MEMORY_GUARD_CRITICAL,
                interval=settings.OMLX_MEMORY_GUARD_INTERVAL,
                retry_after=max(1, settings.OMLX_RETRY_AFTER_SECONDS),
                read=read,
            )
            _guard.start()
            logger.info(
                "memory guard on: %s; refusing at %.0f%%, relieving at %.0f%%",
                _describe(_guard.read()),
                _guard.high * 100,
                _guard.critical * 100,
            )
        return _guard


def stop_guard() -> None:
    global _guard
    with _guard_lock:
        guard, _guard = _guard, None
    if guard is not None:
        guard.stop()


def current() -> Optional[MemoryGuard]:
    """The process's guard while it runs, else None."""
    return _guard


def admit() -> None:
    """MemoryPressure when the process's guard refuses new requests now."""
    guard = _guard
    if guard is not None:
        guard.admit()
