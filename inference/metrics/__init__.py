"""Prometheus metrics of this process: GET /metrics (``view``), the admin Status page's sampler
(admin_panel/history.py reads ``totals()``). docs/metrics.md lists every series.

Two kinds of series, in one registry of omlx's own (``definitions``):

- Counted when something happens, in the server process: HTTP requests (the middleware in
  omlx_site/middleware.py), tokens, time to first token and inter-token latency (``observer``:
  a ``GenerationObserver`` on each API request's subscription, so they work whichever process
  runs the model), model loads and unloads (the pool publishes them: ``model_loaded``, ...).
- Per API key (``keys``): requests and tokens, labelled by the key's id and name.
- Read when scraped, from the loaded engines of this process (``collector``): queue depth,
  memory, and the block cache's counters, through each engine's ``stats()``; in Redis mode, from
  the summaries the workers publish (``workers``): per-worker load, memory and hit rates.

Nothing here imports the pool, the API or the memory guard: they publish into metrics, and what
the collector reads of them is handed to it at start (``connect``).
"""

from .collector import (
    EngineCollector,
    Sources,
    Totals,
    connect,
    encoder_batch,
    model_load_failed,
    model_loaded,
    model_unloaded,
    totals,
    worker_summaries,
)
from .definitions import CONTENT_TYPE, HTTP_REQUESTS, REGISTRY, UNLOAD_REASONS, render
from .keys import ADMIN_LABELS, count_request, key_counts
from .observer import GenerationObserver, recent_ttfts
from .ranks import RankCollector, rank_figures
from .ranks import holds as rank_holds
from .workers import WorkerCollector

__all__ = [
    "ADMIN_LABELS",
    "CONTENT_TYPE",
    "EngineCollector",
    "GenerationObserver",
    "HTTP_REQUESTS",
    "REGISTRY",
    "RankCollector",
    "Sources",
    "Totals",
    "UNLOAD_REASONS",
    "WorkerCollector",
    "connect",
    "count_request",
    "encoder_batch",
    "key_counts",
    "model_load_failed",
    "model_loaded",
    "model_unloaded",
    "rank_figures",
    "rank_holds",
    "recent_ttfts",
    "render",
    "totals",
    "worker_summaries",
]
