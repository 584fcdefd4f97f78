"""The Cache page's cold-directory probe, run on a thread (it takes a few seconds): one at a
time per process; the page polls ``state()`` until it is done."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional

from cache.probe import ModelFacts, ProbeError, ProbeResult, Suggestion, probe, suggest

logger = logging.getLogger("omlx.admin")


@dataclass
class ProbeState:
    running: bool = False
    started: Optional[float] = None
    result: Optional[ProbeResult] = None
    suggestions: List[Suggestion] = field(default_factory=list)
    error: Optional[str] = None
    models: List[str] = field(default_factory=list)  # the loaded models the suggestions considered


class ProbeJob:
    def __init__(self):
        self._lock = threading.Lock()
        self._state = ProbeState()

    def start(self, directory, block_bytes: int, facts: List[ModelFacts]) -> bool:
        """Start a probe; False if one is running."""
        with self._lock:
            if self._state.running:
                return False
            self._state = ProbeState(running=True, started=time.time(), models=[f.name for f in facts])
        threading.Thread(
            target=self._run, args=(directory, block_bytes, facts), daemon=True, name="omlx-admin-probe"
        ).start()
        return True

    def state(self) -> ProbeState:
        with self._lock:
            return self._state

    def _run(self, directory, block_bytes: int, facts: List[ModelFacts]) -> None:
        result, suggestions, error = None, [], None
        try:
            result = probe(directory, block_bytes=block_bytes)
            block_tokens = facts[0].block_tokens if facts else 256
            suggestions = suggest(result, facts, block_tokens=block_tokens)
        except ProbeError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - shown on the page
            logger.exception("cold-directory probe failed")
            error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._state = ProbeState(
                False, self._state.started, result, suggestions, error, self._state.models
            )


probe_job = ProbeJob()
