"""What the pool reports: its loaded models, each servable model's state, and the status rows of
every folder (kind, size, estimate, state, settings) with the memory limits, for the API
(/v1/models/status), the console's Models page and `omlx models`. A mixin of ``ModelPool``
(inference/pool/pool.py): it reads the pool's slots and settings under its lock, and never loads,
scans or changes anything."""

from __future__ import annotations

import logging
import time
from typing import Dict

from . import model_settings
from .discovery import ModelFolder
from .memory import process_rss

logger = logging.getLogger("omlx.models")


class PoolReport:
    def loaded_models(self) -> Dict[str, dict]:
        """Every loaded model id -> {"engine", "memory_bytes" (its estimate, counted against the
        limit), "loaded_at" (time.time())}; never loads, scans or reads settings."""
        with self._lock:
            return {
                i: {
                    "engine": s.engine,
                    "memory_bytes": s.estimate.total_bytes,
                    "loaded_at": time.time() - (time.monotonic() - s.loaded_at),
                }
                for i, s in self._slots.items()
            }

    def states(self) -> Dict[str, str]:
        """Every servable model id -> "loaded", "loading", "unloaded" or "down" (its engine lost
        a machine of its distributed group: inference.distributed.engine) in this process."""
        folders = self.folders()
        with self._lock:
            return {i: self._state(i, f) for i, f in folders.items() if f.servable}

    def _state(self, model_id: str, folder: ModelFolder) -> str:
        """ "loaded", "loading" or "unloaded" (under the lock); an adapter is loaded when it is
        attached to its loaded base."""
        if folder.base is not None:
            slot = self._slots.get(folder.base)
            return "loaded" if slot is not None and model_id in slot.adapters else "unloaded"
        slot = self._slots.get(model_id)
        if slot is not None:
            return "down" if getattr(slot.engine, "lost", None) else "loaded"
        return "loading" if model_id in self._reserved else "unloaded"

    def status(self) -> dict:
        """Every folder with its kind, size, estimate and pool state; the memory limits."""
        folders = self.folders()
        now = time.monotonic()
        rows = []
        for model_id, folder in folders.items():
            values = self._settings.get(model_id) or model_settings.defaults()
            with self._lock:
                slot = self._slots.get(model_id)
                loading = model_id in self._reserved
                attached = folder.base is not None and self._state(model_id, folder) == "loaded"
            est = None
            if folder.servable:
                try:
                    est = self.estimate(model_id).to_dict()
                except Exception as exc:  # an unreadable folder must not break the listing
                    logger.warning("estimating %s failed: %s", model_id, exc)
            since = slot.idle_since() if slot is not None else None
            rows.append(
                {
                    "id": model_id,
                    "path": str(folder.path),
                    "origin": folder.origin,
                    "importable": folder.gguf is not None,
                    "type": folder.kind,
                    "base": folder.base,  # a LoRA adapter's base model id, else None
                    "vision": folder.vision,
                    "servable": folder.servable,
                    "reason": folder.reason,
                    "alias": values.get("alias"),
                    "size_bytes": folder.size_bytes,
                    "memory_estimate": est,
                    "measured_weights_bytes": slot.measured_weights_bytes if slot is not None else None,
                    "loaded": slot is not None or attached,
                    "loading": loading,
                    "pinned": bool(values.get("pinned")),
                    "ttl_seconds": values.get("ttl_seconds"),
                    "active_requests": slot.engine.num_active() if slot is not None else 0,
                    "idle_seconds": None if since is None else round(now - since, 3),
                }
            )
        return {
            "object": "list",
            "data": rows,
            "memory": {
                "max_model_memory": self.max_model_memory,
                "model_memory_used": self.used_bytes(),
                "max_process_memory": self.max_process_memory,
                "process_memory": process_rss(),
            },
        }
