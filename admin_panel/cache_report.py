"""What the Cache page shows, as plain data: the KV block cache per model, both tiers.

Loaded models are read from their engine's block cache (as GET /v1/cache/status does), without
stopping the engine, so figures may lag a step; models that are not loaded, and the files of
every model, from the cold-tier directory and its rows (cache/cold_usage.py, as `omlx cache`
does). A row is one model fingerprint: one model folder at one dtype and block size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from cache.cold_usage import usage
from cache.probe import DEFAULT_BLOCK_BYTES, ModelFacts


@dataclass
class CacheRow:
    name: str
    fingerprint: Optional[str]  # None: prefix caching is off for this loaded model
    loaded: bool = False
    model_path: Optional[str] = None
    hot_blocks: int = 0
    hot_bytes: int = 0
    hot_capacity: int = 0
    hot_evictions: int = 0
    cold_files: int = 0
    cold_bytes: int = 0
    cold_rows: int = 0
    cold_writes: int = 0
    cold_reads: int = 0
    cold_errors: int = 0  # failed reads and writes
    cold_dropped: int = 0  # blocks not written because the writer's queue was full
    lookup_tokens: int = 0
    hot_hit_tokens: int = 0
    cold_hit_tokens: int = 0
    last_used: Optional[float] = None
    shared_with: List[str] = field(default_factory=list)  # loaded models with the same fingerprint

    @property
    def tokens_saved(self) -> int:
        return self.hot_hit_tokens + self.cold_hit_tokens

    @property
    def hot_rate(self) -> Optional[float]:
        return self.hot_hit_tokens / self.lookup_tokens if self.lookup_tokens else None

    @property
    def cold_rate(self) -> Optional[float]:
        return self.cold_hit_tokens / self.lookup_tokens if self.lookup_tokens else None

    @property
    def hit_rate(self) -> Optional[float]:
        return self.tokens_saved / self.lookup_tokens if self.lookup_tokens else None


@dataclass
class Totals:
    hot_bytes: int
    hot_capacity: int
    cold_files: int
    cold_bytes: int
    cold_cap: Optional[int]  # OMLX_COLD_CACHE_MAX_BYTES; None: no cap
    cold_ttl: Optional[float]
    cold_dir: Optional[str]
    lookup_tokens: int
    tokens_saved: int

    @property
    def hit_rate(self) -> Optional[float]:
        return self.tokens_saved / self.lookup_tokens if self.lookup_tokens else None


def loaded_caches(pool) -> Dict[str, object]:
    """model id -> the engine of each loaded model."""
    out = {}
    for model_id in pool.ids():
        engine = pool.loaded(model_id)
        if engine is not None:
            out[model_id] = engine
    return out


def rows(pool, root: Optional[Path]) -> List[CacheRow]:
    """One row per loaded model (its own hot tier), then one per fingerprint on disk that no
    loaded model has. Copies of one model in two folders share a fingerprint, hence the cold
    tier: their rows show the same cold figures, and ``shared_with`` names the others."""
    loaded: List[CacheRow] = []
    off: List[CacheRow] = []
    for model_id, engine in loaded_caches(pool).items():
        stats = engine.stats()
        if stats.hot_capacity_bytes is None:  # caching off
            off.append(CacheRow(model_id, None, loaded=True))
            continue
        hot, counts = stats.cache.get("hot", {}), stats.cache.get("lookups", {})
        row = CacheRow(
            model_id,
            stats.fingerprint,
            loaded=True,
            hot_blocks=hot.get("blocks", 0),
            hot_bytes=hot.get("bytes", 0),
            hot_capacity=stats.hot_capacity_bytes,
            hot_evictions=hot.get("evictions", 0),
            lookup_tokens=counts.get("lookup_tokens", 0),
            hot_hit_tokens=counts.get("hot_hit_tokens", 0),
            cold_hit_tokens=counts.get("cold_hit_tokens", 0),
        )
        s = stats.cache.get("cold")
        if stats.cold_dir is not None and s is not None:
            row.cold_files, row.cold_bytes = s["files"], s["bytes"]
            row.cold_writes, row.cold_reads = s["writes"], s["reads"]
            row.cold_errors, row.cold_dropped = s["read_errors"] + s["write_errors"], s["dropped"]
        loaded.append(row)
    for row in loaded:
        row.shared_with = [r.name for r in loaded if r.fingerprint == row.fingerprint and r is not row]
    on_disk: List[CacheRow] = []
    if root is not None and Path(root).is_dir():
        names = _names_by_path(pool)
        for u in usage(root):
            mine = [r for r in loaded if r.fingerprint == u.fingerprint]
            if not mine:
                name = names.get(_resolved(u.model_path)) or (
                    Path(u.model_path).name if u.model_path else None
                )
                mine = [CacheRow(name or f"? {u.fingerprint[:12]}", u.fingerprint)]
                on_disk.extend(mine)
            for row in mine:
                # The files on disk are the truth; a live tier's own count may lag its writer.
                row.model_path = u.model_path
                row.cold_files, row.cold_bytes, row.cold_rows, row.last_used = (
                    u.files,
                    u.bytes,
                    u.rows,
                    u.last_used,
                )
    return sorted(loaded, key=lambda r: r.name) + sorted(on_disk, key=lambda r: r.name) + off


def totals(cache_rows: List[CacheRow], settings) -> Totals:
    root = settings.OMLX_COLD_CACHE_DIR
    cold = {r.fingerprint: r for r in cache_rows if r.fingerprint}  # a shared cold tier counts once
    return Totals(
        hot_bytes=sum(r.hot_bytes for r in cache_rows),
        hot_capacity=sum(r.hot_capacity for r in cache_rows),
        cold_files=sum(r.cold_files for r in cold.values()),
        cold_bytes=sum(r.cold_bytes for r in cold.values()),
        cold_cap=getattr(settings, "OMLX_COLD_CACHE_MAX_BYTES", None),
        cold_ttl=getattr(settings, "OMLX_COLD_CACHE_TTL_SECONDS", None),
        cold_dir=str(root) if root is not None else None,
        lookup_tokens=sum(r.lookup_tokens for r in cache_rows),
        tokens_saved=sum(r.tokens_saved for r in cache_rows),
    )


def model_facts(pool) -> List[ModelFacts]:
    """What the probe's suggestions need from each loaded model with a block cache."""
    status = {r["id"]: r for r in pool.status()["data"]}
    facts = []
    for model_id, engine in loaded_caches(pool).items():
        stats = engine.stats()
        if stats.hot_capacity_bytes is None or engine.loaded is None:
            continue
        row = status.get(model_id) or {}
        weights = row.get("measured_weights_bytes") or (
            (row.get("memory_estimate") or {}).get("weights_bytes") or 0
        )
        speeds = stats.cache.get("speeds", {})
        facts.append(
            ModelFacts(
                model_id,
                weights_bytes=weights,
                kv_bytes_per_token=engine.loaded.kv_bytes_per_token,
                block_tokens=stats.block_size,
                hot_capacity_bytes=stats.hot_capacity_bytes,
                prefill_tokens_per_s=speeds.get("prefill_tokens_per_s", 0.0),
                cold_read_bytes_per_s=speeds.get("read_bytes_per_s", 0.0),
            )
        )
    return facts


def probe_block_bytes(facts: List[ModelFacts], cache_rows: List[CacheRow]) -> int:
    """The size the probe's files get: a loaded model's block, else the mean block file on disk."""
    sizes = [f.block_bytes for f in facts if f.block_bytes > 0]
    if not sizes:
        sizes = [r.cold_bytes // r.cold_files for r in cache_rows if r.cold_files]
    size = max(sizes) if sizes else DEFAULT_BLOCK_BYTES
    return min(64 << 20, max(64 << 10, size))


def _names_by_path(pool) -> Dict[str, str]:
    out = {}
    for model_id, folder in pool.folders().items():
        resolved = _resolved(str(folder.path))
        if resolved:
            out[resolved] = model_id
    return out


def _resolved(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    try:
        return str(Path(path).resolve())
    except OSError:
        return path
