"""The block cache: the engine's PrefixCache, over a hot tier in RAM and an optional cold tier."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import mlx.core as mx

from .block_key import ModelFingerprint, block_key, salted_root
from .block_pool import BlockPool, KVBlock
from .layout import FULL, STATE, CacheLayout, LayerSpec
from .prefix_cache import KVSnapshot, PrefixCache, PrefixHit

logger = logging.getLogger("omlx.cache")

# Restores win until this many reads are measured: the first read of a process is the slowest
# (MLX's first load), and one small block read while the machine is busy would otherwise stop
# every restore, a whole system prompt on a shared tier included.
MIN_READS = 4
REMEASURE_EVERY = 16  # a cold block is restored after this many refused in a row, to measure again


@dataclass
class CacheStats:
    lookups: int = 0
    lookup_tokens: int = 0  # tokens asked for
    hot_hit_tokens: int = 0
    cold_hit_tokens: int = 0
    stored_blocks: int = 0
    collisions: int = 0  # a key matched but the tokens did not (never served)
    recomputed_instead: int = 0  # cold blocks skipped because recomputing them was faster

    @property
    def hit_rate(self) -> float:
        hits = self.hot_hit_tokens + self.cold_hit_tokens
        return hits / self.lookup_tokens if self.lookup_tokens else 0.0


@dataclass
class SpeedEstimate:
    """Measured speeds (exponential moving averages) that decide restore or recompute.

    Reading a block from the SSD tier is usually far faster than recomputing its tokens, but
    not on every disk and model: a cold block is used only while its estimated read time is
    below the estimated prefill time of its tokens. Until both are measured (reads: ``MIN_READS``
    of them), restore wins.
    """

    read_bytes_per_s: float = 0.0
    prefill_tokens_per_s: float = 0.0
    alpha: float = 0.3
    refused: int = 0  # cold blocks refused in a row (``restore_wins``)
    reads: int = 0  # reads measured

    def observe_read(self, nbytes: int, seconds: float) -> None:
        if seconds > 0 and nbytes > 0:
            self.read_bytes_per_s = self._mix(self.read_bytes_per_s, nbytes / seconds)
            self.reads += 1

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        if seconds > 0 and tokens > 0:
            self.prefill_tokens_per_s = self._mix(self.prefill_tokens_per_s, tokens / seconds)

    def restore_is_faster(self, nbytes: int, tokens: int) -> bool:
        if self.reads < MIN_READS or not self.prefill_tokens_per_s:
            return True
        return nbytes / self.read_bytes_per_s < tokens / self.prefill_tokens_per_s

    def restore_wins(self, nbytes: int, tokens: int) -> bool:
        """``restore_is_faster``, except that every ``REMEASURE_EVERY``-th cold block refused in a
        row is restored anyway: reads are measured only when they happen, so without this one
        slow read (a busy disk, a machine loaded for a moment) would stop every later restore
        for good, and the blocks other workers wrote to a shared tier would never be used."""
        if self.restore_is_faster(nbytes, tokens):
            self.refused = 0
            return True
        self.refused += 1
        if self.refused >= REMEASURE_EVERY:
            self.refused = 0
            return True
        return False

    def _mix(self, old: float, new: float) -> float:
        return new if not old else (1 - self.alpha) * old + self.alpha * new


class BlockCache(PrefixCache):
    """Prefix lookups and stores in blocks of ``fingerprint.block_size`` tokens.

    A prompt's blocks are chained: block i's key hashes block i-1's key and its own tokens, so a
    key names a whole prefix; block 0's parent is the model's root key, or the root salted with
    the request's cache salt (``block_key.salted_root``), so a request sees only the blocks of
    its own salt. Lookup walks the chain through the hot tier, then the cold tier, comparing
    tokens before using any block (a key collision can never serve wrong KV). Where the chain
    stops, the longest common prefix with any child of the last matched block is used
    too: that reuses the partial last block of an earlier prompt, or the start of a block that
    diverges part-way, so a conversation that grows by a turn recomputes only the new tokens.

    What a block holds per layer follows the model's ``CacheLayout`` (cache/layout.py): every
    token's KV for full attention, the last tokens of a sliding window, the recurrent state at
    the block's end. A walked chain is cut back to where every kind can resume
    (``CacheLayout.hit_can_end``); a store makes a block only where the engine's snapshots hold
    all of it, and no later block after one it cannot make.

    Blocks are immutable; a lookup copies their KV into the request's own cache, and a store
    copies slices of a request's KV into new blocks, so a shared block is never written. New
    blocks are written through to the cold tier (in the background), so the cold tier holds
    every block the hot tier has had, and a restart or a crash loses none.
    """

    wants_kv = True

    def __init__(
        self,
        fingerprint: ModelFingerprint,
        hot_capacity_bytes: int,
        cold=None,
        key_fn: Callable[[bytes, Sequence[int]], bytes] = block_key,
        layout: Optional[CacheLayout] = None,
    ):
        self.fingerprint = fingerprint
        self.layout = layout  # None: full attention on every layer
        self.block_size = fingerprint.block_size
        self.root = fingerprint.root_key()
        self.cold = cold
        self.key_fn = key_fn  # tests swap it to force collisions
        self.hot = BlockPool(hot_capacity_bytes, on_evict=self._evicted)
        self.hot_capacity_bytes = hot_capacity_bytes  # configured; shrink_hot lowers it for a while
        self.stats = CacheStats()
        self.speeds = SpeedEstimate()

    # -- PrefixCache ----------------------------------------------------------------------------

    def lookup(
        self, token_ids: Sequence[int], max_tokens: int, salt: Optional[str] = None
    ) -> Optional[PrefixHit]:
        tokens = tuple(token_ids[:max_tokens])
        self.stats.lookups += 1
        self.stats.lookup_tokens += len(tokens)
        chain = self._walk(tokens, salted_root(self.root, salt), for_lookup=True)
        while chain:
            chain = chain[: self._servable(chain)]
            loaded = self._promote_chain(chain)
            done = len(loaded) == len(chain)
            chain = loaded  # when a cold block failed to load, the hit ends before it
            if done:
                break
        if not chain:
            return None
        blocks = [b for b, _, _ in chain]
        held = [b for b in blocks if b.key in self.hot]
        self.hot.acquire(held)
        self.hot.touch(blocks)
        pos = sum(n for _, n, _ in chain)
        cold_tokens = sum(n for _, n, from_cold in chain if from_cold)
        hit = PrefixHit(
            pos,
            self._assemble(chain, pos),
            hot_tokens=pos - cold_tokens,
            cold_tokens=cold_tokens,
            handle=held,
        )
        self.stats.hot_hit_tokens += hit.hot_tokens
        self.stats.cold_hit_tokens += cold_tokens
        return hit

    def peek(self, token_ids: Sequence[int], max_tokens: int, salt: Optional[str] = None) -> int:
        """The length of the chain ``lookup`` would walk, hot and cold blocks alike (a cold block
        that lookup would recompute instead still counts): no loads, no stats, no LRU touch."""
        chain = self._walk(tuple(token_ids[:max_tokens]), salted_root(self.root, salt), for_lookup=False)
        return sum(n for _, n, _ in chain[: self._servable(chain)])

    def release(self, hit: PrefixHit) -> None:
        if hit.handle:
            self.hot.release(hit.handle)
            hit.handle = None

    def store(
        self, token_ids: Sequence[int], snapshots: List[KVSnapshot], salt: Optional[str] = None
    ) -> None:
        if not snapshots:
            return
        tokens = tuple(token_ids[: max(s.end for s in snapshots)])
        specs = self._specs(len(snapshots[0].layers))
        chain, parent = [], salted_root(self.root, salt)
        new: List[KVBlock] = []
        for start in range(0, len(tokens), self.block_size):
            part = tokens[start : start + self.block_size]
            key = self.key_fn(parent, part)
            block, on_disk = self.hot.get(key), None
            if block is None and self.cold is not None and self.cold.contains(key):
                on_disk = self.cold.entry(key)
            found = block if block is not None else on_disk
            if found is not None and found.token_ids != part:
                self.stats.collisions += 1
                break  # never chain new blocks under a key that names other tokens
            if block is None:
                # Also a block on disk (written earlier, or by another worker on a shared tier)
                # that the lookup did not restore: what was just computed stays in RAM, so this
                # worker's next lookups find it there (the cold tier skips its write).
                layers = _payload(specs, snapshots, start, start + len(part))
                if layers is None:
                    if on_disk is None:
                        break  # the snapshots cannot fill this block, so no later one either
                    chain.append(on_disk)
                    parent = key
                    continue
                block = KVBlock(key, parent, part, layers, 0)
                new.append(block)
            chain.append(block)
            parent = key
        if new:
            mx.eval([a for b in new for layer in b.layers for a in layer])
            for block in new:
                block.nbytes = payload_bytes(block.layers)
                # Write-through, so a crash or restart loses nothing (a block that does not fit
                # in RAM was handed down already).
                if self.hot.add(block) and self.cold is not None:
                    self.cold.put(block)
            self.stats.stored_blocks += len(new)
        self.hot.touch([b for b in chain if b.key in self.hot])

    # -- tiers ---------------------------------------------------------------------------------

    def flush_hot(self) -> int:
        """Move every unreferenced hot block down to the cold tier (or drop it without one)."""
        return self.hot.flush()

    def write_down(self) -> int:
        """Before a model is unloaded: hand every hot block the cold tier lacks to it (blocks
        whose write-through was dropped by a full queue), waiting for room instead of dropping,
        then wait until all are written. Returns how many were handed down."""
        if self.cold is None:
            return 0
        missing = [b for b in self.hot.blocks() if b.layers is not None and not self.cold.contains(b.key)]
        for block in missing:
            self.cold.put(block, wait=True)
        self.cold.flush()
        return len(missing)

    def clear_hot(self) -> Tuple[int, int]:
        """Drop every hot block no request holds, without writing it down, and wait for the cold
        tier's queued writes (so a clear of the cold tier that follows finds them on disk).
        Returns (blocks, bytes) dropped. Run it on the engine thread (Engine.call)."""
        dropped = self.hot.drop_unreferenced()
        if self.cold is not None:
            self.cold.flush()
        return dropped

    def shrink_hot(self) -> int:
        """Lower the hot tier's budget to half of what it holds now: the least recently used
        blocks go down to the cold tier (or are dropped without one); held blocks stay."""
        before = self.hot.used_bytes
        self.hot.set_capacity(before // 2)
        return before - self.hot.used_bytes

    def restore_hot(self) -> None:
        self.hot.set_capacity(self.hot_capacity_bytes)

    def engine_busy(self, busy: bool) -> None:
        if self.cold is not None:
            self.cold.defer_writes(busy)

    def close(self) -> None:
        if self.cold is not None:
            self.cold.close()

    def _evicted(self, block: KVBlock) -> None:
        if self.cold is not None and block.layers is not None:
            self.cold.put(block)

    def _walk(
        self, tokens: Tuple[int, ...], root: bytes, for_lookup: bool
    ) -> List[Tuple[KVBlock, int, bool]]:
        """The chain of cached blocks under ``root`` (the request's salted root) that cover a
        prefix of ``tokens``, as (block or cold entry, tokens used, from cold), verified token by
        token, nothing loaded. The last element may use only the start of its block: the longest
        common prefix with any child of the last whole match (a partial tail block, or a block
        that diverges part-way). ``for_lookup`` counts collisions and skips cold blocks that
        recomputing would beat."""
        chain: List[Tuple[KVBlock, int, bool]] = []
        parent, pos = root, 0
        while len(tokens) - pos >= self.block_size:
            wanted = tokens[pos : pos + self.block_size]
            key = self.key_fn(parent, wanted)
            block, from_cold = self.hot.get(key), False
            if block is None and self.cold is not None and self.cold.contains(key):
                block, from_cold = self.cold.entry(key), True
            if block is None:
                break
            if block.token_ids != wanted:
                if for_lookup:
                    self.stats.collisions += 1
                    logger.warning(
                        "block key collision caught by token verification (key %s)", key.hex()[:16]
                    )
                break
            if from_cold and for_lookup and not self.speeds.restore_wins(block.nbytes, block.num_tokens):
                self.stats.recomputed_instead += 1
                break
            chain.append((block, self.block_size, from_cold))
            parent, pos = key, pos + self.block_size
        rest = tokens[pos:]
        candidates = [(b, False) for b in self.hot.children(parent)]
        if self.cold is not None:
            candidates += [(b, True) for b in self.cold.children(parent) if b.key not in self.hot]
        best, best_n, best_cold, best_rank = None, 0, False, (0, 0)
        for block, from_cold in candidates:
            n = _common_prefix(block.token_ids, rest)
            # Longest usable first: a block whose end the hit reaches beats a longer partial
            # match where the layout cannot end a hit (recurrent layers).
            rank = (n if self._can_end(block.num_tokens, n) else 0, n)
            if n and rank > best_rank:
                best, best_n, best_cold, best_rank = block, n, from_cold, rank
        if best is not None:
            if best_cold and for_lookup and not self.speeds.restore_wins(best.nbytes, best_n):
                self.stats.recomputed_instead += 1
            else:
                chain.append((best, best_n, best_cold))
        return chain

    def _servable(self, chain: List[Tuple[KVBlock, int, bool]]) -> int:
        """How many elements of a walked chain a hit can use: it must end where every layer
        kind can resume (``CacheLayout.hit_can_end``): a partial last element is dropped for
        recurrent layers, or for sliding windows smaller than its block."""
        for k in range(len(chain), 0, -1):
            block, used, _ = chain[k - 1]
            if self._can_end(block.num_tokens, used):
                return k
        return 0

    def _can_end(self, block_tokens: int, used: int) -> bool:
        return self.layout is None or self.layout.hit_can_end(block_tokens, used)

    def _promote_chain(self, chain):
        """The chain with its cold blocks read into the hot tier, up to the first that fails."""
        out = []
        for block, used, from_cold in chain:
            if block.layers is None:  # a cold entry not read yet
                block = self._promote(block)
                if block is None:
                    break
            out.append((block, used, from_cold))
        return out

    def _assemble(self, chain, end: int) -> list:
        """Per layer, the caches of a hit of ``end`` tokens from the blocks of a chain."""
        specs = self._specs(len(chain[0][0].layers))
        layers = []
        for i, spec in enumerate(specs):
            if spec.kind == STATE:
                layers.append(chain[-1][0].layers[i])
                continue
            first = 0 if spec.kind == FULL else max(0, end - spec.window)
            pieces, pos = [], 0
            for block, used, _ in chain:
                stored_from = pos + block.num_tokens - spec.stored_tokens(block.num_tokens)
                lo, hi = max(pos, first), pos + used
                if hi > lo:
                    pieces.append(
                        tuple(a[..., lo - stored_from : hi - stored_from, :] for a in block.layers[i])
                    )
                pos += used
            if len(pieces) == 1:
                layers.append(pieces[0])
            else:
                layers.append(tuple(mx.concatenate(parts, axis=2) for parts in zip(*pieces)))
        return layers

    def _specs(self, num_layers: int) -> Tuple[LayerSpec, ...]:
        if self.layout is None:
            return (LayerSpec(FULL),) * num_layers
        return self.layout.layers

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """The engine reports each prefill chunk, so restores can be weighed against it."""
        self.speeds.observe_prefill(tokens, seconds)

    def snapshot(self) -> dict:
        """Counters for the API usage fields, /metrics and the admin panel."""
        out = {
            "hot": asdict(self.hot.stats),
            "lookups": asdict(self.stats),
            "hit_rate": self.stats.hit_rate,
            "speeds": asdict(self.speeds),
        }
        if self.cold is not None:
            out["cold"] = asdict(self.cold.stats)
        return out

    def _promote(self, entry: KVBlock) -> Optional[KVBlock]:
        """Read a cold block's KV and put it in the hot tier."""
        start = time.perf_counter()
        layers = self.cold.load(entry.key)
        if layers is None:
            return None
        mx.eval([a for kv in layers for a in kv])
        self.speeds.observe_read(entry.nbytes, time.perf_counter() - start)
        block = KVBlock(entry.key, entry.parent, entry.token_ids, layers, payload_bytes(layers))
        self.hot.add(block)
        return block


def _payload(specs, snapshots: List[KVSnapshot], start: int, end: int) -> Optional[list]:
    """A block's per-layer payload for tokens [start, end), copied out of the first snapshots
    that hold what each layer keeps; None when some layer's part is in none of them."""
    layers = []
    for i, spec in enumerate(specs):
        if spec.kind == STATE:
            state = next((s.layers[i] for s in snapshots if s.end == end and s.layers[i] is not None), None)
            if state is None:
                return None
            layers.append(tuple(mx.contiguous(a) for a in state))
            continue
        need = end - spec.stored_tokens(end - start)
        for snap in snapshots:
            if snap.end >= end and snap.layers[i] is not None and snap.layers[i][-1] <= need:
                *arrays, first = snap.layers[i]
                # contiguous() copies, so a block never keeps a request's whole KV buffer alive.
                layers.append(tuple(mx.contiguous(a[..., need - first : end - first, :]) for a in arrays))
                break
        else:
            return None
    return layers


def payload_bytes(layers: list) -> int:
    return sum(a.nbytes for layer in layers for a in layer)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
