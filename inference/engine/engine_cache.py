"""The engine's side of the block cache: the prefix cache a loaded model gets (RAM tier, SSD
tier, keyed by the model's fingerprint), how many KV tokens a decode batch may hold, and the
moments the engine stores KV in it (a prompt's end, the whole blocks of a prefill chunk, a
request's caches before they are dropped). A mixin of ``Engine`` (inference/engine/engine.py):
it runs on the engine's thread and reads its ``config``, ``loaded``, ``runner``,
``prefix_cache`` and ``clock``."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from cache.block_cache import BlockCache
from cache.block_key import fingerprint_model_folder
from cache.layout import kv_descriptor
from cache.prefix_cache import PrefixCache
from cache.sizes import parse_size, total_ram

from .request import Request

logger = logging.getLogger("omlx.engine")


def block_cache_for(
    loaded, config, component: str = "", rows: bool = True, cache_class=BlockCache
) -> PrefixCache:
    """The prefix cache of ``loaded`` under ``config`` (an ``EngineConfig``): a ``BlockCache`` (or
    ``cache_class``, a subclass) over a RAM tier and, with ``paged_ssd_cache_dir``, an SSD tier; the
    "off" ``PrefixCache`` when caching is off or the model's layout cannot be split into blocks.
    ``component`` goes into the fingerprint (and the cold tier's model.json): a rank's layer range on a
    model split across machines (inference.distributed), so that no block of some layers is ever
    restored into others. ``rows``: start Django for the cold tier's rows when nobody has (a split
    model's other ranks work from the block files alone)."""
    if not config.prefix_cache:
        return PrefixCache()
    layout = loaded.cache_layout
    if layout is None:
        logger.warning(
            "%s: its cache has a kind of layer that cannot be split into blocks "
            "(chunked attention, attention sinks); prefix caching is "
            "off for this model",
            loaded.path,
        )
        return PrefixCache()
    store_kv = cold_kv_format(loaded, config)
    # A quantized SSD tier is part of what a block is: its blocks never meet float ones.
    ssd = f"|ssd-{kv_descriptor(layout, store_kv)}" if store_kv else ""
    descriptor = layout.descriptor + ssd + component
    fingerprint = fingerprint_model_folder(loaded.path, loaded.dtype, descriptor, config.cache_block_size)
    cold = None
    if config.paged_ssd_cache_dir:
        from cache import cold_index
        from cache.cold_tier import ColdTier

        if rows and cold_index.installed() is None:
            # A plain script or benchmark: Django has not started, so this caller starts it
            # for the cold tier's rows (the server's cache app installed them at start).
            from cache import orm_index

            orm_index.setup()
        info = {"path": str(Path(loaded.path).resolve()), "dtype": loaded.dtype, "opened": int(time.time())}
        if component:
            info["part"] = component.lstrip("|")
        cold = ColdTier(
            Path(config.paged_ssd_cache_dir).expanduser(),
            fingerprint,
            model_info=info,
            layout=layout,
            store_kv=store_kv,
        )
    hot_bytes = parse_size(config.hot_cache_max_size, "hot_cache_max_size")
    return cache_class(fingerprint, hot_bytes, cold, layout=layout)


def cold_kv_format(loaded, config) -> str:
    """``q<bits>g<group>`` when a float model keeps its SSD tier quantized
    (``paged_ssd_cache_bits``), else ""."""
    bits, group = config.paged_ssd_cache_bits, config.kv_group_size
    if bits is None or not config.paged_ssd_cache_dir or loaded.cache_layout.kv:
        return ""
    if any(d % group for d in loaded.head_dims):
        logger.warning(
            "%s: paged_ssd_cache_bits ignored: kv_group_size=%d does not divide its head "
            "dimension (%s); its SSD tier keeps float KV",
            loaded.path,
            group,
            ", ".join(map(str, sorted(loaded.head_dims))),
        )
        return ""
    return f"q{bits}g{group}"


class EngineCache:
    def _make_prefix_cache(self) -> PrefixCache:
        return block_cache_for(self.loaded, self.config)

    def _kv_capacity(self) -> int:
        if self.config.max_kv_tokens is not None:
            return self.config.max_kv_tokens
        budget = int(total_ram() * self.config.kv_cache_memory_fraction)
        return max(1024, budget // self.loaded.kv_bytes_per_token)

    def _store_prompt(self, request: Request, snapshots) -> None:
        """Store a computed prompt. A model with sliding-window or recurrent layers also took a
        snapshot one token before the end (``Prefill.cuts``): stored as its own tail
        block, so that the same prompt again computes only its last token."""
        began = time.perf_counter()
        end = request.num_computed
        if any(s.end == end - 1 for s in snapshots):
            self._store(request, end - 1, [s for s in snapshots if s.end < end])
        self._store(request, end, snapshots)
        self.clock.store += time.perf_counter() - began

    def _store_whole_blocks(self, request: Request, done_before: int, snapshots) -> None:
        """Store the blocks a prefill chunk completed, so that requests sharing this prefix
        (waiting for it, or arriving now) can start before the whole prompt is done. Models
        with sliding-window or recurrent layers always do: what those layers hold of a block
        is gone a chunk or two later."""
        size = self.config.cache_block_size
        whole = request.num_computed // size * size
        if not self.prefix_cache.wants_kv or whole <= done_before // size * size:
            return
        if self.config.share_inflight_prefixes or not self.loaded.cache_layout.plain:
            began = time.perf_counter()
            self._store(request, whole, snapshots)
            self.clock.store += time.perf_counter() - began

    def _keep_kv(self, request: Request) -> None:
        """Hand a running request's caches to the prefix cache before they are dropped."""
        began = time.perf_counter()
        end = self.runner.kv_snapshot(request) if self.prefix_cache.wants_kv else None
        if end is not None:
            snapshots = request.snapshots + [end]
            self.prefix_cache.store(request.all_token_ids[: end.end], snapshots, request.cache_salt)
        request.snapshots = []
        self.clock.store += time.perf_counter() - began

    def _store(self, request: Request, end: int, snapshots) -> None:
        """Store the KV of ``request``'s first ``end`` tokens from a prefill's ``snapshots``."""
        self.prefix_cache.store(request.all_token_ids[:end], snapshots, request.cache_salt)
