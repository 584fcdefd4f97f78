"""Where an engine step's time goes: a record per step, kept on demand (``EngineConfig.step_trace``
steps, 0: off) and read outside the engine (``Engine.step_trace()``, GET /v1/engine/step_trace).

The clocks behind a record are always kept (``StepClock``: a few ``perf_counter`` calls a step,
at the points where the host hands work to the device or waits for it); the setting only decides
whether the engine, once a step is done, turns them into a ``StepRecord`` and keeps it
(``StepTrace``, a ring of the last N). So a trace does not change what it measures, and when it is
off a step costs one test more than without it (the benchmark row: bench_engine.py --step-trace).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import List, Optional


class StepClock:
    """Seconds the engine thread spent, since the last ``reset``, on each kind of work that a
    step's wall time does not show by itself. The parts are disjoint (no clock runs inside
    another), so what they leave of a step's wall time is the host's own work
    (``StepRecord.host_seconds``).

    device_wait  blocked on the device for results: the read of the previous decode tokens
                 (``tolist``), the sampled first tokens, the ``mx.eval`` that ends a prefill;
    prefill_compute  the ``mx.eval`` of a prefill pass that finished prompts, before their KV
                 is stored and their first tokens sampled: on the CPU, the pass itself;
    launch       in ``mx.async_eval`` queueing a decode pass: on the CPU it returns only when
                 most of the pass has run (docs/engine.md), so there it is mostly computing;
    sampling     building the sampling graphs (and the grammar masks) of decode and first tokens;
    restore      loading cached prefixes into requests' caches;
    merge        moving requests whose prompts are done into the decode batch;
    store        handing computed KV to the prefix cache (the block copies it evaluates).
    Restore and merge build lazy copies: the copying runs with the next pass that reads them.
    """

    __slots__ = ("device_wait", "prefill_compute", "launch", "sampling", "restore", "merge", "store")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.device_wait = self.prefill_compute = self.launch = self.sampling = 0.0
        self.restore = self.merge = self.store = 0.0

    def seconds(self) -> dict:
        """The clocks as ``StepRecord``'s fields."""
        return {f"{name}_seconds": getattr(self, name) for name in self.__slots__}


@dataclass(slots=True)
class StepRecord:
    """One engine step. Times are seconds; ``start`` is ``time.perf_counter()`` (the process's
    monotonic clock: compare records with each other, not with wall-clock time)."""

    step: int  # the engine's step index (Engine.steps), 1 for its first
    start: float  # when the step began, after the scheduler chose its work
    seconds: float  # its wall time (what StepCosts learns from)
    schedule_seconds: float  # the scheduler choosing the step's work, before ``start``
    decode_rows: int  # rows of its decode pass (with the prompts the step finished); 0: no pass
    decode_passes: int  # decode forward passes (0 or 1)
    prefill_rows: int  # requests whose prompt tokens the step computed
    prompt_tokens: int  # prompt tokens computed (cached ones are not: they were restored)
    padded_tokens: int  # tokens the prefill passes computed, padding included
    prefill_passes: int  # prefill forward passes
    first_tokens: int  # prompts finished, whose first tokens the step sampled
    restores: int  # cached prefixes loaded into requests' caches
    restored_tokens: int  # the tokens they hold
    prefill_seconds: float  # wall time of the prefill (with stores, first tokens, merges)
    decode_seconds: float  # wall time of the decode step and its launch
    restore_seconds: float
    merge_seconds: float
    store_seconds: float
    sampling_seconds: float
    launch_seconds: float
    device_wait_seconds: float
    prefill_compute_seconds: float
    verify: bool = False  # its decode pass was a speculative verify pass (several tokens a row)

    @property
    def host_seconds(self) -> float:
        """The step's wall time the clocks leave: Python building graphs and keeping books
        (scheduling not included: ``schedule_seconds``)."""
        return max(
            0.0,
            self.seconds
            - self.restore_seconds
            - self.merge_seconds
            - self.store_seconds
            - self.sampling_seconds
            - self.launch_seconds
            - self.device_wait_seconds
            - self.prefill_compute_seconds,
        )

    def as_dict(self) -> dict:
        return dict(asdict(self), host_seconds=self.host_seconds)


class StepTrace:
    """The last ``capacity`` step records, oldest first. Appended by the engine thread, read by
    any thread (a lock: a deque must not change while it is copied)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"a step trace keeps at least one step, not {capacity}")
        self.capacity = capacity
        self._records: deque = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    def append(self, record: StepRecord) -> None:
        with self._lock:
            self._records.append(record)

    def records(self, last: Optional[int] = None) -> List[StepRecord]:
        """The records kept, oldest first; with ``last``, only that many of the newest."""
        with self._lock:
            records = list(self._records)
        return records if last is None else records[len(records) - min(last, len(records)) :]
