"""The model pool: which models are offered, which are loaded, and what to unload to make room.

ModelPool holds the discovered folders (``discovery``), a snapshot of the per-model settings
(``model_settings``) and the loaded engines, each with its memory estimate (``memory``).

Invariants:
- At most one Engine per model id; concurrent first requests for one id load it once (a lock
  per id), and a failed load is retried by the next request.
- The estimates of loaded models plus those being loaded never exceed ``max_model_memory``.
  Before a load, idle models are unloaded in least-recently-used order until the new one fits;
  a pinned model, a leased one (a request is being handed to it, or a loaded model drafts with
  it: ``drafts``) and one with requests in its engine are never unloaded. When even that is not
  enough the load is refused with ``InsufficientMemory`` (HTTP 507), before anything is allocated.
- Unloading writes the model's hot KV blocks down to the cold tier and waits for the writer, so
  the model's prefixes are cold hits when it comes back.
- A LoRA adapter (``adapters``) has no engine of its own: leasing it leases its base model's
  engine (loading the base if needed, once for all its adapters) and attaches the adapter to it
  on first use; the base's estimate grows by the adapter's weights. It is unloaded with its base.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional

from inference import metrics

from . import model_settings
from .adapters import adapter_bytes
from .drafts import DraftModels, _Slot
from .discovery import ModelFolder, discover, inspect, signature
from .engines import AdapterEngine, make_engine, stop_engine, weights_bytes
from .other_apps import OtherApps
from .errors import InsufficientMemory, ModelBusy, ModelUnavailable, check_up  # noqa: F401  (pool.X)
from .pool_report import PoolReport
from .memory import MemoryEstimate, estimate, estimate_encoder, format_bytes, process_rss

logger = logging.getLogger("omlx.models")


class ModelPool(DraftModels, PoolReport):
    """Model ids -> folders -> engines, under a memory limit (see the module docstring)."""

    SETTINGS_MAX_AGE = 1.0  # seconds a settings snapshot is trusted by a worker thread

    def __init__(
        self,
        model_dirs,
        engine_settings: Optional[dict] = None,
        max_model_memory: Optional[int] = None,
        max_process_memory: Optional[int] = None,
        read_settings=model_settings.read_all,
        hf_cache_dir: Optional[Path] = None,
        other_apps: Optional[OtherApps] = None,
        draft_model: Optional[str] = None,
    ):
        if isinstance(model_dirs, (str, Path)):
            model_dirs = [model_dirs]
        self.model_dirs: List[Path] = [Path(d).expanduser() for d in model_dirs]
        self.hf_cache_dir = Path(hf_cache_dir).expanduser() if hf_cache_dir is not None else None
        self.other_apps = other_apps  # LM Studio's and Ollama's models (discovery.other_apps)
        self.engine_settings = dict(engine_settings or {})
        self.draft_model = draft_model  # the id of the default draft model (drafts.DraftModels)
        self.max_model_memory = max_model_memory
        self.max_process_memory = max_process_memory
        self._read_settings = read_settings
        self._lock = threading.RLock()
        self._load_locks: Dict[str, threading.Lock] = {}
        self._folders: Dict[str, ModelFolder] = {}
        self._signature = None
        self._settings: Dict[str, dict] = {}
        self._settings_at = float("-inf")
        self._estimates: Dict[str, MemoryEstimate] = {}
        self._slots: Dict[str, _Slot] = {}
        self._reserved: Dict[str, int] = {}  # loads in progress -> their estimate
        self._closing: Dict[int, int] = {}  # id(slot) of engines being closed -> their estimate
        self._closed = False

    # -- discovery and settings ---------------------------------------------------------------

    @property
    def model_dir(self) -> Path:
        return self.model_dirs[0]

    def folders(self) -> Dict[str, ModelFolder]:
        """Every folder found, servable or not, by id; rescanned when a directory changed."""
        self._refresh_settings()
        sig = (signature(self.model_dirs, self.hf_cache_dir, self.other_apps), self._kind_overrides())
        with self._lock:
            if sig != self._signature:
                self._scan(sig)
            return dict(self._folders)

    def rescan(self) -> Dict[str, ModelFolder]:
        self._refresh_settings(force=True)
        with self._lock:
            self._scan(
                (signature(self.model_dirs, self.hf_cache_dir, self.other_apps), self._kind_overrides())
            )
            return dict(self._folders)

    def models(self) -> Dict[str, Path]:
        """Every servable model id -> its folder."""
        return {i: f.path for i, f in self.folders().items() if f.servable}

    def ids(self) -> List[str]:
        return list(self.models())

    def resolve(self, name: str) -> Optional[str]:
        """The model id that ``name`` (an id or an alias) names, if it is servable."""
        folders = self.folders()
        if name in folders:
            return name if folders[name].servable else None
        for model_id, values in self._settings.items():
            if values.get("alias") == name and model_id in folders and folders[model_id].servable:
                return model_id
        return None

    def not_found_message(self, name: str) -> str:
        """Why ``name`` cannot be used: unknown, or a folder that cannot be served and why."""
        folder = self._folders.get(name)
        if folder is not None and folder.reason is not None:
            return f"The model '{name}' cannot be served: {folder.reason}"
        return f"The model '{name}' does not exist"

    def path(self, name: str) -> Optional[Path]:
        model_id = self.resolve(name)
        return None if model_id is None else self._folders[model_id].path

    def settings(self, name: str) -> dict:
        """The settings of the model ``name`` names (defaults for a model without a row)."""
        self._refresh_settings()
        model_id = self.resolve(name) or name
        return dict(self._settings.get(model_id) or model_settings.defaults())

    def update_settings(self, model_id: str, changes: dict) -> dict:
        """Save ``changes`` to a discovered model's settings; KeyError for an unknown id,
        ValueError for bad values. Applies at once (no restart)."""
        folders = self.folders()
        if model_id not in folders:
            raise KeyError(model_id)
        saved = model_settings.save(model_id, changes, set(folders))
        self.forget_estimates()  # the KV format (kv_bits) is a setting: the KV bytes may change
        self._refresh_settings(force=True)
        return saved

    def estimate(self, model_id: str) -> MemoryEstimate:
        folder = self.folders()[model_id]
        with self._lock:
            if model_id not in self._estimates:
                if folder.adapter is not None:  # what attaching it adds to its base's engine
                    value = MemoryEstimate(adapter_bytes(folder), 0, 0)
                elif folder.kind == "llm":
                    kv = model_settings.load_overrides(self.settings(model_id))
                    value = estimate(folder.weight_files, folder.config, {**self.engine_settings, **kv})
                else:
                    value = estimate_encoder(folder.weight_files, folder.config, self.engine_settings)
                self._estimates[model_id] = value
            return self._estimates[model_id]

    def forget_estimates(self) -> None:
        """The engine settings changed: every estimate is made again when next asked for."""
        with self._lock:
            self._estimates.clear()

    def kind(self, name: str) -> Optional[str]:
        """ "llm", "embedding" or "reranker" for a servable model ``name`` names, else None."""
        model_id = self.resolve(name)
        return None if model_id is None else self._folders[model_id].kind

    # -- engines --------------------------------------------------------------------------------

    def engine(self, name: str):
        """The engine of ``name`` (id or alias), loaded now if needed. KeyError for an unknown
        name (ModelUnavailable for a folder that cannot be served), InsufficientMemory when it
        cannot fit, ModelLoadError when loading fails."""
        with self.lease(name) as engine:
            return engine

    @contextmanager
    def lease(self, name: str) -> Iterator[object]:
        """The engine of ``name``, held in use while the block runs: a request is handed to it
        inside the block, and the pool does not unload it meanwhile."""
        model_id = self._require(name)
        folder = self._folders[model_id]
        slot = self._acquire(folder.base or model_id)
        try:
            self._hold_draft(folder.base or model_id, slot)
            yield slot.engine if folder.base is None else self._attach(model_id, folder, slot)
        finally:
            with self._lock:
                slot.leases -= 1
                slot.last_used = time.monotonic()

    def _attach(self, model_id: str, folder: ModelFolder, slot: _Slot) -> AdapterEngine:
        """The base engine of a leased slot, running requests with adapter ``model_id`` (attached
        now if it is not yet; its weights then count in the base's estimate)."""
        from inference.engine.adapter_config import AdapterError

        engine = slot.engine
        if model_id not in engine.runner.adapters.by_name:
            try:
                attached = engine.attach_adapter(model_id, folder.path)
            except AdapterError as exc:
                raise ModelUnavailable(model_id, f"LoRA adapter that cannot be served: {exc}") from None
            with self._lock:
                if model_id not in slot.adapters:
                    slot.adapters.add(model_id)
                    slot.estimate = replace(
                        slot.estimate, weights_bytes=slot.estimate.weights_bytes + attached.nbytes
                    )
        return AdapterEngine(engine, model_id)

    def loaded(self, name: str):
        """The engine of ``name`` if it is loaded, else None (never loads)."""
        model_id = self.resolve(name) or name
        with self._lock:
            slot = self._slots.get(model_id)
            return None if slot is None else slot.engine

    def unload(self, name: str, reason: str = "manual") -> bool:
        """Unload a model (its hot blocks go to the cold tier first). False if it was not
        loaded; ModelBusy while requests are in flight or when it is pinned (unpin it first)."""
        model_id = self.resolve(name) or name
        self._refresh_settings()
        with self._lock:
            slot = self._slots.get(model_id)
            if slot is None:
                return False
            if (self._settings.get(model_id) or {}).get("pinned"):
                raise ModelBusy(f"The model '{model_id}' is pinned; unpin it first")
            targets = [i for i, s in self._slots.items() if s.draft is slot]
            if targets:
                raise ModelBusy(f"The model '{model_id}' drafts for '{targets[0]}'; unload that model first")
            if slot.busy():
                raise ModelBusy(
                    f"The model '{model_id}' has {slot.engine.num_active()} requests in "
                    "flight; it is unloaded once they end (or use its TTL)"
                )
            self._take(model_id)
        self._close(model_id, slot, reason)
        return True

    def unload_idle(self, now: Optional[float] = None) -> List[str]:
        """Unload every loaded model idle for longer than its TTL (pinned ones never)."""
        self._refresh_settings()
        now = time.monotonic() if now is None else now
        expired = []
        with self._lock:
            for model_id, slot in list(self._slots.items()):
                values = self._settings.get(model_id) or {}
                ttl, since = values.get("ttl_seconds"), slot.idle_since()
                if values.get("pinned") or ttl is None or since is None or now - since < ttl:
                    continue
                expired.append((model_id, self._take(model_id)))
        for model_id, slot in expired:
            logger.info("unloading %s: idle for more than its TTL", model_id)
            self._close(model_id, slot, "ttl")
        return [model_id for model_id, _ in expired]

    def load_pinned(self) -> List[str]:
        """Load every pinned model (at start); failures are logged, not raised."""
        self._refresh_settings(force=True)
        done = []
        for model_id, values in sorted(self._settings.items()):
            if values.get("pinned") and self.resolve(model_id) is not None:
                try:
                    self.engine(model_id)
                    done.append(model_id)
                except Exception as exc:
                    logger.error("pinned model %s was not loaded: %s", model_id, exc)
        return done

    def used_bytes(self) -> int:
        with self._lock:
            return self._used()

    def close(self) -> None:
        """Unload every model; later loads raise."""
        with self._lock:
            self._closed = True
            slots = [(i, self._take(i)) for i in list(self._slots)]
        for model_id, slot in slots:
            self._close(model_id, slot, "shutdown")

    # -- internals ------------------------------------------------------------------------------

    def _require(self, name: str) -> str:
        model_id = self.resolve(name)
        if model_id is None:
            folder = self._folders.get(name)
            if folder is not None:
                raise ModelUnavailable(name, folder.reason)
            raise KeyError(name)
        return model_id

    def _acquire(self, model_id: str) -> _Slot:
        with self._lock:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            slot = self._slots.get(model_id)
            if slot is not None:
                check_up(model_id, slot.engine)
                slot.leases += 1
                slot.last_used = time.monotonic()
                return slot
            lock = self._load_locks.setdefault(model_id, threading.Lock())
        with lock:
            with self._lock:
                slot = self._slots.get(model_id)
                if slot is not None:
                    check_up(model_id, slot.engine)
                    slot.leases += 1
                    slot.last_used = time.monotonic()
                    return slot
            need = self.estimate(model_id)
            victims = self._make_room(model_id, need)
            try:
                for victim_id, victim in victims:
                    logger.info("unloading %s (least recently used) to make room for %s", victim_id, model_id)
                    self._close(victim_id, victim, "lru")
                folder = self._folders[model_id]
                logger.info(
                    "loading %s from %s (estimate %s)", model_id, folder.path, format_bytes(need.total_bytes)
                )
                started = time.monotonic()
                try:
                    overrides = model_settings.all_overrides(self.settings(model_id))
                    engine = make_engine(folder, {**self.engine_settings, **overrides})
                except BaseException:
                    metrics.model_load_failed(model_id)
                    raise
            finally:
                with self._lock:
                    self._reserved.pop(model_id, None)
            try:
                measured = engine.call(weights_bytes, timeout=60)
            except Exception as exc:  # the estimate stands
                logger.warning("%s: measuring the loaded weights failed: %s", model_id, exc)
                measured = 0
            if measured > need.weights_bytes:  # account for what is really there
                logger.warning(
                    "%s: weights take %s, estimated %s",
                    model_id,
                    format_bytes(measured),
                    format_bytes(need.weights_bytes),
                )
                need = replace(need, weights_bytes=measured)
            with self._lock:
                if self._closed:
                    engine.close()
                    raise RuntimeError("the server is shutting down")
                now = time.monotonic()
                slot = _Slot(engine, need, now, now, leases=1, measured_weights_bytes=measured)
                self._slots[model_id] = slot
            metrics.model_loaded(model_id, engine, now - started)
            return slot

    def _make_room(self, model_id: str, need: MemoryEstimate) -> List[tuple]:
        """Pick the idle models to unload so that ``need`` fits, take them out of the pool and
        reserve ``need``; InsufficientMemory (nothing changed) when it cannot fit."""
        total = need.total_bytes
        limit, process_limit = self.max_model_memory, self.max_process_memory
        sizes = (
            f"weights {format_bytes(need.weights_bytes)}, KV cache {format_bytes(need.kv_bytes)}, "
            f"hot cache {format_bytes(need.hot_bytes)}"
        )
        if limit is not None and total > limit:
            raise InsufficientMemory(
                f"The model '{model_id}' needs {format_bytes(total)} ({sizes}), more than the whole "
                f"model memory limit of {format_bytes(limit)} (--max-model-memory)"
            )
        rss = process_rss() if process_limit is not None else None
        with self._lock:
            used = self._used()
            freed = 0
            victims = []

            def fits() -> bool:
                model_ok = limit is None or used - freed + total <= limit
                process_ok = rss is None or rss - freed + total <= process_limit
                return model_ok and process_ok

            pinned = {i for i, v in self._settings.items() if v.get("pinned")}
            idle = sorted(
                (s.last_used, i) for i, s in self._slots.items() if i not in pinned and not s.busy()
            )
            for _, victim_id in idle:
                if fits():
                    break
                victims.append(victim_id)
                freed += self._slots[victim_id].estimate.total_bytes
            if not fits():
                kept = (
                    ", ".join(
                        f"{i} {format_bytes(s.estimate.total_bytes)}"
                        f"{' pinned' if i in pinned else ''}{' busy' if s.busy() else ''}"
                        for i, s in self._slots.items()
                        if i not in victims
                    )
                    or "none"
                )
                where = (
                    f"the model memory limit is {format_bytes(limit)} with {format_bytes(used)} in use"
                    if limit is not None and used - freed + total > limit
                    else f"the process memory limit is {format_bytes(process_limit)} with "
                    f"{format_bytes(rss)} in use"
                )
                raise InsufficientMemory(
                    f"The model '{model_id}' needs {format_bytes(total)} ({sizes}); {where}, and the "
                    f"loaded models that cannot be unloaded now (pinned or busy) hold it: {kept}"
                )
            taken = [(i, self._take(i)) for i in victims]
            self._reserved[model_id] = total
            return taken

    def _used(self) -> int:
        """Bytes counted against the limit: loaded models, loads in progress, engines closing."""
        return (
            sum(s.estimate.total_bytes for s in self._slots.values())
            + sum(self._reserved.values())
            + sum(self._closing.values())
        )

    def _take(self, model_id: str) -> _Slot:
        """Take a loaded model out of the pool (under the lock); its memory counts until it is closed."""
        slot = self._slots.pop(model_id)
        self._closing[id(slot)] = slot.estimate.total_bytes
        return slot

    def _close(self, model_id: str, slot: _Slot, reason: str) -> None:
        """Write the hot blocks down to the cold tier, then stop the engine (which waits for
        the cold tier's writer). ``reason`` (lru, ttl, manual, shutdown) is counted in /metrics."""
        try:
            stop_engine(model_id, slot.engine)
        finally:
            self._release_draft(slot)
            with self._lock:
                self._closing.pop(id(slot), None)
            metrics.model_unloaded(model_id, slot.engine, reason)

    def _scan(self, sig) -> None:
        folders = discover(self.model_dirs, self._kind_overrides(), self.hf_cache_dir, self.other_apps)
        if not any(f.servable for f in folders.values()):
            from inference.testkit.demo import DEMO_MODEL_NAME, demo_model_path

            path = demo_model_path()
            demo = inspect(DEMO_MODEL_NAME, path) if path.is_dir() else None
            if demo is None or not demo.servable:  # not built (tests): offer it as the stand-in did
                demo = ModelFolder(DEMO_MODEL_NAME, path, "llm", None)
            folders[DEMO_MODEL_NAME] = demo
        changed = {
            i
            for i in set(folders) | set(self._folders)
            if i not in folders or i not in self._folders or folders[i].path != self._folders[i].path
        }
        for model_id in changed:
            self._estimates.pop(model_id, None)
        self._folders = folders
        self._signature = sig

    def _kind_overrides(self) -> Dict[str, str]:
        return model_settings.kind_overrides(self._settings)

    def _refresh_settings(self, force: bool = False) -> None:
        """Reload the settings snapshot when it is older than SETTINGS_MAX_AGE (never from an
        event loop's thread: ``model_settings.reread``); a loaded engine takes its model's
        changed scheduling settings at once."""
        if not force and time.monotonic() - self._settings_at < self.SETTINGS_MAX_AGE:
            return
        values = model_settings.reread(self._read_settings)
        if values is None:
            return
        with self._lock:
            before, self._settings = self._settings, values
            self._settings_at = time.monotonic()
            loaded = {model_id: slot.engine for model_id, slot in self._slots.items()}
        model_settings.tune_loaded(loaded, before, values, self.engine_settings)
