"""What other threads change in a running engine, between two of its steps: its live settings
(``tune``, from a model's settings) and memory relief (``relieve_memory``, from the memory
guard, inference/pool/memory_guard.py). Each change is queued to the engine thread's inbox and
runs there, so the engine's state is only ever touched by that thread."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import mlx.core as mx

from .config import EngineConfig


def give_back_memory() -> None:
    """Return freed memory to the OS: MLX's buffer cache, then glibc's free lists (freed heap
    stays in the process otherwise, and a cgroup or the OOM killer still counts it)."""
    mx.clear_cache()
    if _libc is not None:
        _libc.malloc_trim(0)


def _load_libc():
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc (macOS, musl)
        return None


_libc = _load_libc()


class EngineControls:
    """Mixed into ``Engine`` (which owns ``config``, ``scheduler``, ``prefix_cache``, ``call``
    and ``_inbox``)."""

    def attach_adapter(self, name: str, path, timeout: Optional[float] = 300):
        """Attach the LoRA adapter in folder ``path`` to this engine's model under ``name``
        (inference.engine.lora; idempotent): requests submitted with ``adapter=name`` then run
        with it. Returns its ``lora.Adapter``; AdapterError (a ValueError) when it cannot be
        served over this model."""
        from pathlib import Path

        from .adapter_config import AdapterError, read_adapter_config

        config = read_adapter_config(Path(path))
        if self.loaded.vision is not None:
            raise AdapterError("adapters of vision-language models are not served")
        return self.call(lambda engine: engine.runner.adapters.attach(name, config), timeout=timeout)

    def adapter(self, name: str):
        """The attached adapter ``name`` (``lora.Adapter``); ValueError when there is none."""
        found = self.runner.adapters.by_name.get(name)
        if found is None:
            raise ValueError(f"no adapter {name!r} is attached to this model")
        return found

    def attach_draft(self, name: Optional[str], loaded=None, error: Optional[str] = None) -> None:
        """Draft with the model ``loaded`` (a ``LoadedModel``, served as ``name``; its weights
        are shared, each row keeps its own draft cache) when speculating with method "draft"
        (inference.engine.speculative.draft_model). ValueError when it cannot draft for this
        model (another tokenizer...); the engine keeps no draft model then, and requests asking
        for one are refused with the reason. ``loaded=None`` detaches it (``error``: why)."""
        from .speculative.draft_model import DraftModel

        if getattr(self.runner, "speculation", None) is None:
            raise ValueError("this model's engine does not speculate (a model split across machines)")
        try:
            draft = DraftModel(name, loaded, self.loaded) if loaded is not None else None
        except ValueError as exc:
            draft, error = None, str(exc)
            self.call(lambda engine: _set_draft(engine, None, error))
            raise
        self.call(lambda engine: _set_draft(engine, draft, error))

    def check_speculation(self, params) -> None:
        """ValueError for a request whose speculative decoding cannot run on this model."""
        policy = getattr(self.runner, "speculation", None)
        if policy is not None:
            policy.check(params)

    def tune(self, wait: bool = True, **changes) -> EngineConfig:
        """Change settings of ``EngineConfig.LIVE`` while the engine runs (a model's settings);
        they apply from the next step. ValueError (nothing changed) for another setting or a
        bad value. ``wait=False`` returns without waiting for the engine thread."""
        other = sorted(set(changes) - set(EngineConfig.LIVE))
        if other:
            raise ValueError(f"{other[0]}: not a setting an engine takes while running")
        config = dataclasses.replace(self.config, **changes)  # checks the values

        def apply(engine):
            engine.config = engine.scheduler.config = config
            engine.runner.speculation.configure(config.speculative, config.num_draft_tokens)
            return config

        if wait:
            return self.call(apply)
        self._inbox.put(("call", (apply, lambda ok, value: None)))
        return config

    # -- memory pressure (the memory guard, inference/pool/memory_guard.py) -------------------

    MEMORY_STEPS = ("hold", "preempt", "shrink", "end")

    def relieve_memory(self, step: str, done: Optional[Callable[[bool, object], None]] = None) -> None:
        """Queue one memory step for the engine thread, to run before its next step, and return
        at once (the guard must not wait behind a long prefill). ``done(ok, result)`` runs on
        the engine thread afterwards.

        hold     admit waiting requests only when nothing runs; give MLX's freed buffers back;
        preempt  hold, and preempt half of the running requests (never the last one) at the next
                 step, their KV going to the prefix cache; result: how many;
        shrink   halve the hot tier (its blocks go down to the cold tier) and give MLX's freed
                 buffers back to the system; result: the bytes the hot tier let go;
        end      admit again (the held requests one per step); the hot tier gets its configured
                 budget back.
        """
        if step not in self.MEMORY_STEPS:
            raise ValueError(f"unknown memory step {step!r}")
        self._inbox.put(("call", (lambda e: e._memory_step(step), done or (lambda ok, value: None))))

    def _memory_step(self, step: str):
        scheduler = self.scheduler
        if step == "hold":
            scheduler.hold = True
            give_back_memory()
        elif step == "preempt":
            return scheduler.shed_for_memory()
        elif step == "shrink":
            freed = self.prefix_cache.shrink_hot()
            give_back_memory()
            return freed
        else:
            scheduler.end_hold()
            self.prefix_cache.restore_hot()
        return None


def _set_draft(engine, draft, error: Optional[str]) -> None:
    """On the engine thread: the draft model of new rows (rows drafting already keep theirs)."""
    policy = engine.runner.speculation
    policy.draft, policy.draft_error = draft, error
