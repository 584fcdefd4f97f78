"""Rank 0's engine for a model split across the ranks of a distributed group.

It is the usual ``Engine`` (API, scheduler, continuous batching, chunked and batched prefill,
priorities), with this rank's slice of the layers (``pipeline.split_model``) and a runner that
sends every step plan to the other ranks first (``leader_runner``), which run them
(``follower``). Not served on a split model yet, each refused with a ValueError (a 400): structured
output, images, LoRA adapters; and the block cache is off (each rank would keep its own layers'
blocks under the same keys: not built yet).
"""

from __future__ import annotations

from cache.prefix_cache import PrefixCache
from inference.engine.engine import Engine
from inference.engine.model_loader import LoadedModel, load_model

from .leader_runner import LeaderRunner
from .pipeline import split_model
from .plan_channel import PlanChannel


class DistributedEngine(Engine):
    """``Engine`` on rank 0 of ``group`` (see the module docstring)."""

    def __init__(self, model_path, group, config=None, **settings):
        if group.size() < 2 or group.rank() != 0:
            raise ValueError("a distributed engine runs on rank 0 of a group of two or more")
        self.group = group
        self.channel = PlanChannel(group)
        super().__init__(model_path, config, **settings)

    def submit(self, prompt, params=None, *args, vision=None, adapter=None, **kwargs):
        if vision is not None:
            raise ValueError("images are not served by a model split across machines")
        if adapter is not None:
            raise ValueError("LoRA adapters are not served by a model split across machines")
        if params is not None and getattr(params, "structured", None) is not None:
            raise ValueError("structured output is not served by a model split across machines")
        return super().submit(prompt, params, *args, **kwargs)

    def _load_model(self, model_path) -> LoadedModel:
        return load_model(model_path, self.config.dtype, shard=lambda model: split_model(model, self.group))

    def _make_prefix_cache(self) -> PrefixCache:
        return PrefixCache()  # off: see the module docstring

    def _make_runner(self, block_size) -> LeaderRunner:
        return LeaderRunner(self.loaded, self.channel, self.clock)

    def _main(self, model_path) -> None:
        try:
            super()._main(model_path)
        finally:
            if getattr(self, "runner", None) is not None or self.loaded is not None:
                self.channel.send({"op": "close"})
