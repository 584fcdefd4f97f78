"""The hot tier: KV blocks in RAM, under a byte budget, evicted least recently used first."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Set, Tuple


@dataclass(eq=False)
class KVBlock:
    """KV of consecutive tokens whose key is ``block_key(parent, token_ids)``.

    A block is immutable once made: a sequence that grows past a partial block gets a new block
    with a new key, so a shared block is never written in place. ``layers`` is opaque here
    (one (keys, values) pair per layer); None while the block lives only on disk.
    """

    key: bytes
    parent: bytes
    token_ids: Tuple[int, ...]
    layers: Optional[list]
    nbytes: int
    ref_count: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class PoolStats:
    blocks: int = 0
    bytes: int = 0
    evictions: int = 0
    evicted_bytes: int = 0


class BlockPool:
    """Blocks by key, plus the index of children by parent key that prefix lookups walk.

    Invariants: ``used_bytes`` is the sum of the blocks' nbytes and never exceeds
    ``capacity_bytes`` after an operation returns, except by blocks that are referenced
    (``ref_count > 0``: a request is using them), which are never evicted. ``_lru`` holds every
    block, least recently used first. ``touch`` moves a chain to the recent end tail first, so
    within a chain the tail is always older than its head and is evicted before it: a shorter
    prefix stays findable longest. Evicted blocks go to ``on_evict`` (the cold tier).
    """

    def __init__(self, capacity_bytes: int, on_evict: Optional[Callable[[KVBlock], None]] = None):
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be >= 0")
        self.capacity_bytes = capacity_bytes
        self.on_evict = on_evict
        self._blocks: Dict[bytes, KVBlock] = {}
        self._children: Dict[bytes, Set[bytes]] = {}
        self._lru: "OrderedDict[bytes, None]" = OrderedDict()
        self.used_bytes = 0
        self.stats = PoolStats()

    def __len__(self):
        return len(self._blocks)

    def __contains__(self, key: bytes) -> bool:
        return key in self._blocks

    def get(self, key: bytes) -> Optional[KVBlock]:
        return self._blocks.get(key)

    def blocks(self) -> List[KVBlock]:
        return list(self._blocks.values())

    def children(self, parent: bytes) -> List[KVBlock]:
        return [self._blocks[k] for k in self._children.get(parent, ())]

    def add(self, block: KVBlock) -> bool:
        """Insert a block, evicting others to make room. A block that cannot fit (bigger than
        the free space left by referenced blocks) is handed to ``on_evict`` instead."""
        if block.key in self._blocks:
            return True
        self._evict_until(self.capacity_bytes - block.nbytes)
        if self.used_bytes + block.nbytes > self.capacity_bytes:
            self._hand_down(block)
            return False
        self._blocks[block.key] = block
        self._children.setdefault(block.parent, set()).add(block.key)
        self._lru[block.key] = None
        self.used_bytes += block.nbytes
        self._sync_stats()
        return True

    def touch(self, chain: List[KVBlock]) -> None:
        """Mark a chain (head first) as just used."""
        for block in reversed(chain):
            if block.key in self._lru:
                self._lru.move_to_end(block.key)

    def acquire(self, blocks: List[KVBlock]) -> None:
        for block in blocks:
            block.ref_count += 1

    def release(self, blocks: List[KVBlock]) -> None:
        for block in blocks:
            if block.ref_count <= 0:
                raise ValueError("release of a block that is not acquired")
            block.ref_count -= 1
        self._evict_until(self.capacity_bytes)

    def set_capacity(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._evict_until(capacity_bytes)

    def flush(self) -> int:
        """Evict every unreferenced block (down to the cold tier); returns how many."""
        before = len(self._blocks)
        self._evict_until(0)
        return before - len(self._blocks)

    def drop_unreferenced(self) -> Tuple[int, int]:
        """Forget every block no request holds, without handing it down (the cache is being
        cleared); returns (blocks, bytes) dropped. Held blocks stay until released."""
        blocks = nbytes = 0
        for key in list(self._lru):
            block = self._blocks[key]
            if block.ref_count > 0:
                continue
            del self._blocks[key]
            self._forget(block)
            blocks += 1
            nbytes += block.nbytes
        return blocks, nbytes

    def remove(self, key: bytes) -> None:
        """Forget a block without handing it down (it turned out to be bad)."""
        block = self._blocks.pop(key, None)
        if block is not None:
            self._forget(block)

    def _evict_until(self, target_bytes: int) -> None:
        if self.used_bytes <= target_bytes:
            return
        for key in list(self._lru):
            if self.used_bytes <= target_bytes:
                break
            block = self._blocks[key]
            if block.ref_count > 0:
                continue
            del self._blocks[key]
            self._forget(block)
            self.stats.evictions += 1
            self.stats.evicted_bytes += block.nbytes
            self._hand_down(block)

    def _forget(self, block: KVBlock) -> None:
        self._lru.pop(block.key, None)
        siblings = self._children.get(block.parent)
        if siblings is not None:
            siblings.discard(block.key)
            if not siblings:
                del self._children[block.parent]
        self.used_bytes -= block.nbytes
        self._sync_stats()

    def _hand_down(self, block: KVBlock) -> None:
        if self.on_evict is not None:
            self.on_evict(block)

    def _sync_stats(self) -> None:
        self.stats.blocks = len(self._blocks)
        self.stats.bytes = self.used_bytes
