"""The block cache of a model split across ranks: each rank keeps the KV of its own layers.

Every rank has its own ``BlockCache`` (RAM tier, and an SSD tier on its own disk) over the
blocks of its layers. Block keys are the usual chain over the tokens, rooted in a fingerprint
that includes the rank's layer range (``layers_component``): the same tokens give the same key
chain on every rank within one split, and a block of layers 0-11 never restores into layers
12-23 (nor into another split of the model), even when the ranks share one SSD folder (one
machine: each rank's blocks go to the folder of its own fingerprint).

A hit is a hit on every rank or on none (``AgreedBlockCache.lookup``): rank 0 looks a prompt up,
sends the tokens it found to the other ranks (``lookup``), each looks them up in its own cache
(reading its SSD blocks into RAM before it answers, so a block it cannot read is simply not
counted), and the ranks agree on the least count (``PlanChannel.agree_min``). Every rank cuts its
hit to that many tokens; rank 0 then seeds the request with it (``seed``) and so does every other
rank. What a rank could not read is thus never promised, and a rank that holds less than rank 0
makes every rank compute the rest.

Stores follow rank 0's: when rank 0 stores a request's KV (a finished prompt, the whole blocks of
a chunk, a request's caches before they are dropped) it tells the other ranks (``store``,
``keep``), and each stores the same tokens from its own caches of the same step.
"""

from __future__ import annotations

from typing import Optional, Sequence

from cache.block_cache import BlockCache
from cache.prefix_cache import PrefixHit
from inference.engine.config import EngineConfig

from .layer_split import LayerSplit
from .plan_channel import PlanChannel, PlanError


def layers_component(split: LayerSplit) -> str:
    """What a rank's fingerprint adds to the model's: its layers and the split they are of."""
    return f"|layers:{split.start}-{split.end}/{split.num_layers}"


def cut_hit(cache, hit: Optional[PrefixHit], n: int) -> Optional[PrefixHit]:
    """``hit`` cut to its first ``n`` tokens (full-attention KV: a slice per layer); None, with
    the hit released, when ``n`` is 0, or when a layer's KV is not cut that way (a sliding
    window past its size, a recurrent state: tensor parallel serves such families). The cache's
    hit counters lose the tokens cut off."""
    if hit is None:
        return None
    if n < hit.num_tokens and not all(_whole(layer, hit.num_tokens) for layer in hit.layers):
        n = 0
    if n <= 0:
        cache.release(hit)
        _uncount(cache, hit.hot_tokens, hit.cold_tokens)
        return None
    if n >= hit.num_tokens:
        return hit
    hot = min(hit.hot_tokens, n)
    _uncount(cache, hit.hot_tokens - hot, hit.cold_tokens - (n - hot))
    hit.layers = [tuple(a[..., :n, :] for a in layer) for layer in hit.layers]
    hit.num_tokens, hit.hot_tokens, hit.cold_tokens = n, hot, n - hot
    return hit


def _whole(layer, num_tokens: int) -> bool:
    """Whether ``layer`` is (keys, values) of every one of the hit's ``num_tokens`` tokens."""
    return (
        isinstance(layer, (tuple, list))
        and len(layer) == 2
        and all(getattr(a, "ndim", 0) >= 2 and a.shape[-2] == num_tokens for a in layer)
    )


def _uncount(cache, hot: int, cold: int) -> None:
    stats = getattr(cache, "stats", None)
    if stats is not None:
        stats.hot_hit_tokens -= hot
        stats.cold_hit_tokens -= cold


class AgreedBlockCache(BlockCache):
    """Rank 0's block cache: a lookup is cut to what every rank holds (the module docstring).
    ``channel``: the group's, None once the group is lost (every lookup then misses)."""

    channel: Optional[PlanChannel] = None

    def lookup(self, token_ids: Sequence[int], max_tokens: int, salt: Optional[str] = None):
        hit = super().lookup(token_ids, max_tokens, salt)
        if hit is None:
            return None
        if self.channel is None:
            return cut_hit(self, hit, 0)
        try:
            self.channel.send({"op": "lookup", "tokens": list(token_ids[: hit.num_tokens]), "salt": salt})
            agreed = self.channel.agree_min(hit.num_tokens)
        except BaseException:
            self.release(hit)
            raise
        return cut_hit(self, hit, agreed)


def cache_settings(config: EngineConfig) -> Optional[dict]:
    """What the other ranks need of rank 0's engine settings to make their block caches (sent
    with ``load``); None when caching is off."""
    if not config.prefix_cache:
        return None
    return {
        "block_size": config.cache_block_size,
        "hot": config.hot_cache_max_size,
        "ssd": bool(config.paged_ssd_cache_dir),
        "ssd_bits": config.paged_ssd_cache_bits,
        "kv_group_size": config.kv_group_size,
    }


_SETTINGS = {"block_size", "hot", "ssd", "ssd_bits", "kv_group_size"}


def follower_config(settings, dtype: Optional[str], cache_dir: Optional[str]) -> EngineConfig:
    """A rank's engine settings for its block cache from rank 0's ``cache_settings`` and its own
    SSD folder (``--cache-dir``; None: a RAM tier only); PlanError when they do not check."""
    if settings is None:
        return EngineConfig(dtype=dtype, prefix_cache=False)
    if not isinstance(settings, dict) or not set(settings) <= {
        "block_size",
        "hot",
        "ssd",
        "ssd_bits",
        "kv_group_size",
    }:
        raise PlanError("load: cache must be an object of block cache settings")
    ssd = settings.get("ssd")
    if not isinstance(ssd, bool):
        raise PlanError("load: cache.ssd must be true or false")
    try:
        return EngineConfig(
            dtype=dtype,
            cache_block_size=settings.get("block_size"),
            hot_cache_max_size=settings.get("hot"),
            paged_ssd_cache_dir=cache_dir if ssd else None,
            paged_ssd_cache_bits=settings.get("ssd_bits"),
            kv_group_size=settings.get("kv_group_size"),
        )
    except (TypeError, ValueError) as exc:
        raise PlanError(f"load: cache settings: {exc}") from None
