"""Rank 0's step plans to the other ranks: JSON objects broadcast over the distributed group.

Besides the messages, ``agree_min``: a value every rank gives, the least of them to every
rank (how many tokens of a prompt every rank's block cache holds).

A message is two collectives, its length and then its bytes (``all_sum`` where only rank 0
contributes); every rank reaches the same collectives in the same order, rank 0 in ``send`` and
the others in ``receive``. JSON only: what arrives is parsed, never unpickled or executed, and a
message over ``MAX_BYTES`` or not a JSON object is refused (``PlanError``).
"""

from __future__ import annotations

import json
import time
from typing import Optional

import mlx.core as mx
import numpy as np


class PlanError(ValueError):
    """A message that is not a valid step plan: the rank cannot stay in step with rank 0."""


class GroupLost(RuntimeError):
    """A collective of the group failed: a rank died or its connection broke. The group cannot
    be used again (the backend fails every pending exchange)."""


_since: Optional[float] = None  # when the watched collective this process waits for began
_hung: Optional[str] = None  # why the watchdog closed the group (inference.distributed.watchdog)


def collective(arrays, watched: bool = True) -> None:
    """Evaluate ``arrays`` (results of collectives); GroupLost when the group broke. While it
    waits, ``waiting_since`` says since when (unless not ``watched``: a model's load or close)."""
    global _since
    if watched:
        _since = time.monotonic()
    try:
        mx.eval(arrays)
    except RuntimeError as exc:  # the ring backend: "[ring] connection to a peer was lost"
        raise GroupLost(_hung or str(exc)) from exc
    finally:
        _since = None


def waiting_since() -> Optional[float]:
    """``time.monotonic()`` when the watched collective now waiting began; None when none is."""
    return _since


def mark_hung(reason: str) -> None:
    """The watchdog is closing the group's connections: collectives fail with ``reason``."""
    global _hung
    _hung = reason


class PlanChannel:
    """The group's broadcast of step plans from rank 0 (see the module docstring)."""

    MAX_BYTES = 64 << 20

    def __init__(self, group: mx.distributed.Group):
        self.group = group
        self.rank = group.rank()

    def send(self, message: dict) -> None:
        """Rank 0: broadcast ``message`` (a JSON object)."""
        if self.rank != 0:
            raise RuntimeError("only rank 0 sends step plans")
        data = np.frombuffer(json.dumps(message, separators=(",", ":")).encode(), dtype=np.uint8)
        if len(data) > self.MAX_BYTES:
            raise PlanError(f"a step plan of {len(data)} bytes is over the {self.MAX_BYTES} byte cap")
        self._broadcast(np.array([len(data)], dtype=np.int32))
        self._broadcast(data)

    def receive(self) -> dict:
        """Ranks but 0: the next message rank 0 sends."""
        (length,) = self._broadcast(np.zeros(1, dtype=np.int32)).tolist()
        if not 0 < length <= self.MAX_BYTES:
            raise PlanError(f"a step plan of {length} bytes")
        data = self._broadcast(np.zeros(length, dtype=np.uint8))
        try:
            message = json.loads(bytes(np.array(data, copy=False)))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlanError(f"a step plan that is not JSON: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("op"), str):
            raise PlanError("a step plan must be a JSON object with an op")
        return message

    def agree_min(self, value: int, watched: bool = True) -> int:
        """Every rank: the least of the ``value`` each rank gives (one all_gather), the same on
        every rank. A count of something each rank holds (a prefix of cached tokens) that all
        of them hold; with 0, a barrier."""
        counts = mx.distributed.all_gather(mx.array([value], dtype=mx.int32), group=self.group, stream=mx.cpu)
        collective(counts, watched)
        return min(counts.tolist())

    def _broadcast(self, data: np.ndarray) -> mx.array:
        out = mx.distributed.all_sum(mx.array(data), group=self.group, stream=mx.cpu)
        collective(out)
        return out
