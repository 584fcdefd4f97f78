"""Draft models in the pool: a model whose speculative decoding drafts with another served model
(its ``draft_model`` setting, else the server's ``--draft-model``) gets that model loaded
through the pool like any other, and attached to its engine (``Engine.attach_draft``) the first
time it is leased after loading.

The target holds a lease on the draft's slot for as long as it is loaded: the draft counts in
the pool's memory as any loaded model does, and a leased slot is busy, so the LRU never unloads
it while a target drafts with it; the lease is released when the target is unloaded. A draft
that cannot be loaded or cannot draft for the target (another tokenizer...) is not attached:
the target serves as without one, and a request that asks for drafting with it is refused with
the reason (a 400). A model that is its own draft shares its weights, with no lease.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from .memory import MemoryEstimate

logger = logging.getLogger("omlx.models")


@dataclass
class _Slot:
    """A loaded model."""

    engine: object
    estimate: MemoryEstimate
    loaded_at: float
    last_used: float  # time.monotonic() of the last lease
    leases: int = 0  # requests being handed to the engine right now, and targets drafting with it
    measured_weights_bytes: int = 0  # the loaded parameters' bytes
    adapters: set = field(default_factory=set)  # ids of the LoRA adapters attached to it
    draft: Optional["_Slot"] = None  # the slot of its draft model, leased while this one is loaded
    draft_checked: bool = False  # its draft model was attached (or refused) since it loaded
    draft_lock: threading.Lock = field(default_factory=threading.Lock)

    def busy(self) -> bool:
        return self.leases > 0 or self.engine.num_active() > 0

    def idle_since(self) -> Optional[float]:
        if self.leases:
            return None
        since = self.engine.idle_since()
        return None if since is None else max(since, self.last_used)


class DraftModels:
    """Mixed into ``ModelPool`` (which owns ``draft_model``, ``settings``, ``resolve``,
    ``folders``, ``_acquire`` and ``_lock``)."""

    def draft_of(self, model_id: str) -> Optional[str]:
        """The id of the model that drafts for ``model_id`` (its setting, else the server's)."""
        name = self.settings(model_id).get("draft_model") or self.draft_model
        return None if name is None else (self.resolve(name) or name)

    def _hold_draft(self, model_id: str, slot: _Slot) -> None:
        """Attach ``model_id``'s draft model to its freshly loaded engine (once per load)."""
        if slot.draft_checked or not hasattr(slot.engine, "attach_draft"):
            return
        with slot.draft_lock:
            if slot.draft_checked:
                return
            draft_id = self.draft_of(model_id)
            if draft_id is not None:
                self._attach_draft(model_id, slot, draft_id)
            slot.draft_checked = True

    def _attach_draft(self, model_id: str, slot: _Slot, draft_id: str) -> None:
        engine = slot.engine
        if draft_id == model_id:
            engine.attach_draft(draft_id, engine.loaded)  # its own draft: the same weights
            return
        folder = self.folders().get(draft_id)
        if folder is None or not folder.servable or folder.kind != "llm" or folder.base is not None:
            why = "no such model" if folder is None else (folder.reason or "not a text model")
            return self._refuse_draft(model_id, engine, f"draft model '{draft_id}' cannot draft: {why}")
        try:
            held = self._acquire(draft_id)
        except Exception as exc:  # unknown, cannot fit, cannot load: the target serves without
            return self._refuse_draft(model_id, engine, f"draft model '{draft_id}' was not loaded: {exc}")
        try:
            engine.attach_draft(draft_id, held.engine.loaded)
        except Exception as exc:
            self._release(held)
            return self._refuse_draft(model_id, engine, str(exc))
        with self._lock:
            slot.draft = held
        logger.info("%s drafts with %s", model_id, draft_id)

    def _refuse_draft(self, model_id: str, engine, error: str) -> None:
        logger.warning("%s: no draft model: %s", model_id, error)
        try:
            engine.attach_draft(None, error=error)
        except ValueError:  # an engine that does not speculate
            pass

    def _release_draft(self, slot: _Slot) -> None:
        """The target of ``slot`` is unloaded: its draft model may be unloaded from now on."""
        with self._lock:
            held, slot.draft = slot.draft, None
        if held is not None:
            self._release(held)

    def _release(self, held: _Slot) -> None:
        with self._lock:
            held.leases -= 1
            held.last_used = time.monotonic()
