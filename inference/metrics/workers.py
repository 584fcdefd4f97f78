"""Series of /metrics read at scrape time from the summaries the workers publish in Redis mode
(inference/dispatch/worker_summary.py), one sample per live worker. Routing decisions are counted
where they are made (``definitions.ROUTE_DECISIONS``)."""

from __future__ import annotations

import logging
from typing import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from . import collector
from .definitions import REGISTRY

logger = logging.getLogger("omlx.metrics")


class WorkerCollector:
    def describe(self) -> Iterable:
        return []

    def collect(self) -> Iterable:
        try:
            workers = collector._sources.workers()
        except Exception as exc:  # Redis away: the other series still answer
            logger.warning("cannot read the workers' summaries: %s", exc)
            return
        if not workers:
            return
        up = GaugeMetricFamily("omlx_worker_up", "Redis mode: live workers (1 each)", labels=["worker"])
        load = GaugeMetricFamily(
            "omlx_worker_requests", "Requests in a worker's engines, by state", labels=["worker", "state"]
        )
        lookups = CounterMetricFamily(
            "omlx_worker_lookup_tokens",
            "Prompt tokens a worker looked up in its prefix cache",
            labels=["worker"],
        )
        hits = CounterMetricFamily(
            "omlx_worker_hit_tokens",
            "Prompt tokens a worker served from its cache, by tier",
            labels=["worker", "tier"],
        )
        ratio = GaugeMetricFamily(
            "omlx_worker_hit_ratio",
            "Cached / looked-up prompt tokens of a worker since it started",
            labels=["worker"],
        )
        memory = GaugeMetricFamily(
            "omlx_worker_memory_bytes", "Resident memory of a worker", labels=["worker"]
        )
        row = GaugeMetricFamily(
            "omlx_worker_decode_row_tokens",
            "What a row of a worker's decode steps costs, in prompt tokens, as it measured it "
            "(the router weighs its queue with it)",
            labels=["worker"],
        )
        for worker, summary in sorted(workers.items()):
            up.add_metric([worker], 1)
            if summary is None:
                continue
            load.add_metric([worker, "running"], summary.running)
            load.add_metric([worker, "waiting"], summary.waiting)
            lookups.add_metric([worker], summary.lookup_tokens)
            hits.add_metric([worker, "hot"], summary.hot_hit_tokens)
            hits.add_metric([worker, "cold"], summary.cold_hit_tokens)
            if summary.hit_ratio is not None:
                ratio.add_metric([worker], summary.hit_ratio)
            if summary.memory_bytes is not None:
                memory.add_metric([worker], summary.memory_bytes)
            if summary.decode_row_tokens > 0:
                row.add_metric([worker], summary.decode_row_tokens)
        yield from (up, load, lookups, hits, ratio, memory, row)


REGISTRY.register(WorkerCollector())
