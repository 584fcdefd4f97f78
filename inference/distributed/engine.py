"""Rank 0's engine for a model split across the ranks of a distributed group.

It is the usual ``Engine`` (API, scheduler, continuous batching, chunked and batched prefill,
priorities), with this rank's slice of the layers (``pipeline.split_model``) and a runner that
sends every step plan to the other ranks first (``leader_runner``), which run them
(``follower``). Not served on a split model yet, each refused with a ValueError (a 400):
structured output, images, LoRA adapters.

The block cache is on as on one machine, each rank keeping its own layers' blocks
(``rank_cache``): a lookup is agreed with the other ranks (a hit on every rank or on none), and
every store here is told to them (``store``, ``keep``), so they store the same tokens.

A rank that dies (or whose connection breaks) fails the collective rank 0 is in
(``GroupLost``): every request in flight ends with an error that says so, the engine closes
(the model is down: a new request answers 503 until the server restarts), and the server stays
up for everything else.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from cache.prefix_cache import PrefixCache
from inference.engine.engine import Engine
from inference.engine.engine_cache import block_cache_for
from inference.engine.engine_thread import _wait_for_os_thread_exit
from inference.engine.model_loader import LoadedModel, ModelLoadError, load_model
from inference.engine.request import Request

from .group import DistributedGroup
from .leader_runner import LeaderRunner
from . import plan_channel
from .plan_channel import GroupLost, PlanChannel
from .rank_cache import AgreedBlockCache, cache_settings
from .rank_stats import RankFigures
from .tensor import part_component, sharder

logger = logging.getLogger("omlx.distributed")

CLOSE_GRACE = 3.0  # seconds past the watchdog's timeout that close() waits for a hung exchange


class DistributedEngine(Engine):
    """``Engine`` on rank 0 of ``group`` (see the module docstring). ``lost``: why the group
    failed, or None."""

    def __init__(self, model_path, group: DistributedGroup, config=None, **settings):
        group.claim(self)
        self.distributed = group
        self.channel = PlanChannel(group.group)
        self.lost: Optional[str] = None
        self.split = None  # what this rank holds, once loaded: its LayerSplit or TensorShard
        # Every rank's cache and memory figures and what it holds (status page, /metrics).
        self.rank_figures = RankFigures(group.parallel)
        self.abandoned = False  # whether close() left the engine's thread waiting for the ranks
        try:
            super().__init__(model_path, config, **settings)
        except BaseException:
            group.release(self)
            raise

    def submit(self, prompt, params=None, *args, vision=None, adapter=None, **kwargs):
        if vision is not None:
            raise ValueError("images are not served by a model split across machines")
        if adapter is not None:
            raise ValueError("LoRA adapters are not served by a model split across machines")
        if params is not None and getattr(params, "structured", None) is not None:
            raise ValueError("structured output is not served by a model split across machines")
        return super().submit(prompt, params, *args, **kwargs)

    def _load_model(self, model_path) -> LoadedModel:
        if self.config.kv_quant is not None:
            raise ValueError("quantized KV (kv_bits) is not served by a model split across machines")
        config = self.config
        parallel = self.distributed.parallel
        self.channel.send(
            {
                "op": "load",
                "model": model_path.name,
                "dtype": config.dtype,
                "cache": cache_settings(config),
                "parallel": parallel,
            }
        )
        parts = []
        shard = sharder(parallel, self.distributed.group, parts)

        # Every rank says whether it loaded the model (from here on, the steps are timed:
        # inference.distributed.watchdog); a rank that could not says why in its log.
        try:
            loaded = load_model(model_path, config.dtype, shard=shard)
            self.split = parts[0]
        except BaseException:
            try:
                self.channel.agree_min(0, watched=False)
            except GroupLost:
                pass
            raise
        if not self.channel.agree_min(1, watched=False):
            raise ModelLoadError(
                f"{model_path.name}: another rank of the distributed group could not load it "
                "(its log, rank<r>.log, says why)"
            )
        return loaded

    def _make_prefix_cache(self) -> PrefixCache:
        component = part_component(self.split)
        cache = block_cache_for(self.loaded, self.config, component, cache_class=AgreedBlockCache)
        if isinstance(cache, AgreedBlockCache):
            cache.channel = self.channel
        return cache

    def _store(self, request: Request, end: int, snapshots) -> None:
        self.runner.tell({"op": "store", "id": request.request_id, "end": end})
        super()._store(request, end, snapshots)

    def _keep_kv(self, request: Request) -> None:
        if self.prefix_cache.wants_kv and request.request_id in self.runner.known:
            self.runner.tell({"op": "keep", "id": request.request_id})
        super()._keep_kv(request)

    def _make_runner(self, block_size) -> LeaderRunner:
        # block_size: snapshots at block boundaries for sliding windows, as on every rank. Its
        # checks run forward passes: every rank's too.
        runner = LeaderRunner(self.loaded, self.channel, self.clock, block_size)
        # Once loaded, every rank's figures: the status page shows what each holds from now.
        self.rank_figures.collect(self.channel, self.prefix_cache, self.split)
        return runner

    def _step(self) -> None:
        try:
            had = self.scheduler.has_work()
            super()._step()
            # Every EVERY seconds while it works, and after the step that ends the work (fresh
            # while idle); never on an idle step (a call between steps: nothing changed).
            busy = self.scheduler.has_work()
            if (busy and self.rank_figures.due()) or (had and not busy):
                self.rank_figures.collect(self.channel, self.prefix_cache, self.split)
        except GroupLost as exc:
            self.lost = f"a machine of the distributed group stopped answering ({exc}); the model is down"
            logger.error("%s: %s", self.loaded.path.name, self.lost)
            self.runner.channel = None  # nothing more is sent: reset and drop stay local
            if isinstance(self.prefix_cache, AgreedBlockCache):
                self.prefix_cache.channel = None
            self._fail_all(self.lost)
            self._inbox.put(("close", None))

    def _main(self, model_path) -> None:
        try:
            super()._main(model_path)
        finally:
            if self.lost is None and self.loaded is not None:
                self._close_ranks()
            self.distributed.release(self)

    def close(self) -> None:
        """As ``Engine.close``, but a wait for the other ranks does not hold it for ever: when
        the engine's thread has waited in one exchange with them for the watchdog's timeout and
        ``CLOSE_GRACE`` seconds more (the watchdog has shut the ring connections, and the
        exchange still has not failed: MLX's ring backend may never return from a collective
        whose peer died before it began), the thread is left where it waits (a daemon thread:
        the process exits without it), ``abandoned`` is set and the log says which rank."""
        watchdog = self.distributed.watchdog
        if watchdog is None or not self._thread.is_alive():
            return super().close()
        limit = watchdog.timeout + CLOSE_GRACE
        self._inbox.put(("close", None))
        while self._thread.is_alive():
            self._thread.join(0.1)
            since = plan_channel.waiting_since()
            if since is not None and time.monotonic() - since > limit and self._thread.is_alive():
                self._closer.detach()  # neither now nor at exit: it would wait for ever
                self.abandoned = True
                self.distributed.broken = "an exchange with the other ranks never ended"
                self.distributed.release(self)
                logger.error(
                    "%s: an exchange with the other ranks has not ended %g s after it began, and "
                    "the ring backend still waits for them (%s): closed without them",
                    self.loaded.path.name,
                    limit,
                    self.distributed.ranks_state(),
                )
                return
        _wait_for_os_thread_exit(self._thread.native_id)  # as Engine.close does after its join
        super().close()

    def _close_ranks(self) -> None:
        """Tell the other ranks to close the model and wait until every one has written its hot
        blocks down (a restart then finds them). Timed as a step is (the watchdog's
        ``OMLX_DISTRIBUTED_TIMEOUT``): a rank that died or hangs does not hold the close, nor
        the server's exit; the log says so. A rank still writing then finishes on its own (each
        block file whole or absent) and exits when it finds rank 0 gone."""
        try:
            self.channel.send({"op": "close"})
            self.channel.agree_min(0)
        except GroupLost as exc:
            logger.error(
                "%s: closed without the other ranks' confirmation (%s; %s): their hot blocks may "
                "not all be on their SSD tiers",
                self.loaded.path.name,
                exc,
                self.distributed.ranks_state(),
            )
