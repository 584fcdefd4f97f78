"""The series of /metrics that are counted when something happens, in one registry of omlx's own
(never prometheus_client's global one); docs/metrics.md lists every series. The series read at
scrape time are made by ``collector.EngineCollector``, registered in the same registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# 5 ms to 60 s: a cached prompt's first token on a fast machine up to a cold load of a large model.
LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.5,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
)
UNLOAD_REASONS = ("lru", "ttl", "manual", "memory", "shutdown")

REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_REQUESTS = Counter(
    "omlx_http_requests",
    "HTTP requests answered, by route pattern, method and status code",
    ["endpoint", "method", "status"],
    registry=REGISTRY,
)
PROMPT_TOKENS = Counter(
    "omlx_prompt_tokens",
    "Prompt tokens of finished API requests (each prompt once)",
    ["model"],
    registry=REGISTRY,
)
CACHED_PROMPT_TOKENS = Counter(
    "omlx_prompt_cached_tokens",
    "Prompt tokens of finished API requests served from the KV cache",
    ["model"],
    registry=REGISTRY,
)
GENERATION_TOKENS = Counter(
    "omlx_generation_tokens", "Tokens generated for API requests (every choice)", ["model"], registry=REGISTRY
)
GENERATIONS = Counter(
    "omlx_generations",
    "Choices that ended, by finish reason (stop, length, tool_calls, error, abort)",
    ["model", "finish_reason"],
    registry=REGISTRY,
)
TTFT = Histogram(
    "omlx_time_to_first_token_seconds",
    "From the API request handed to a worker to its first generated token (queueing and any model "
    "load included)",
    ["model"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
ITL = Histogram(
    "omlx_inter_token_latency_seconds",
    "Time between generated tokens of a choice, per token",
    ["model"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
REQUEST_PHASE = Histogram(
    "omlx_request_phase_seconds",
    "Where a finished generation's time went in the engine, by phase: queue (waiting for admission), "
    "restore (cached KV loaded), prefill (its forward passes), prefill_wait (admitted, before its first "
    "token, while the engine ran other work), decode (first token to the end)",
    ["model", "phase"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
KEY_REQUESTS = Counter(
    "omlx_key_requests",
    'API and /metrics requests per key that authenticated them (key_id "-": the --api-key)',
    ["key_id", "key_name"],
    registry=REGISTRY,
)
KEY_TOKENS = Counter(
    "omlx_key_tokens",
    "Tokens of finished generations per key, by kind: prompt (each prompt once) or completion",
    ["key_id", "key_name", "kind"],
    registry=REGISTRY,
)
ROUTE_DECISIONS = Counter(
    "omlx_route_decisions",
    "Redis mode: requests this server sent to each worker, by reason: prefix (it held the longest "
    "prefix: a prefix hit), balance (an overload fallback: the worker holding a longer prefix had "
    "more work queued than the prefix saves), least_loaded (nobody held one, or that policy), random",
    ["worker", "reason"],
    registry=REGISTRY,
)
ROUTE_TOKENS = Counter(
    "omlx_route_tokens",
    "Redis mode: estimated prompt tokens of the requests this server sent each worker (kind "
    "prompt), and of those, the prefix the worker held by the router's view (kind held)",
    ["worker", "kind"],
    registry=REGISTRY,
)
ROUTE_QUEUED_WORK = Gauge(
    "omlx_route_queued_work",
    "Redis mode: the work (estimated prompt tokens to compute, plus generated tokens times the "
    "worker's measured cost of a decode row, or OMLX_ROUTE_DECODE_WEIGHT) of the requests this "
    "server sent each worker that have not ended",
    ["worker"],
    registry=REGISTRY,
)
ROUTE_SUMMARIES_REFUSED = Counter(
    "omlx_route_summaries_refused",
    "Redis mode: worker summaries refused, at each read of them (not signed with the secret, too "
    "large, malformed, or naming another worker)",
    registry=REGISTRY,
)
MODEL_LOADS = Counter("omlx_model_loads", "Models loaded by the pool", ["model"], registry=REGISTRY)
MODEL_LOAD_FAILURES = Counter(
    "omlx_model_load_failures", "Model loads that failed", ["model"], registry=REGISTRY
)
MODEL_LOAD_SECONDS = Histogram(
    "omlx_model_load_seconds",
    "Time to load a model",
    ["model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
    registry=REGISTRY,
)
MODEL_UNLOADS = Counter(
    "omlx_model_unloads",
    "Models unloaded by the pool, by reason: lru (room for another model), ttl "
    "(idle past its TTL), manual (the API or admin panel), memory (the memory guard), shutdown",
    ["model", "reason"],
    registry=REGISTRY,
)
ENCODER_BATCHES = Counter(
    "omlx_embedding_forward_passes",
    "Forward passes of embedding and reranker models (each runs the "
    "sequences of every request that met in one batch)",
    ["model"],
    registry=REGISTRY,
)
ENCODER_SEQUENCES = Counter(
    "omlx_embedding_sequences",
    "Sequences (inputs, query-document pairs) run by embedding and "
    "reranker models; divided by the forward passes: the batch size requests got",
    ["model"],
    registry=REGISTRY,
)


def render() -> bytes:
    return generate_latest(REGISTRY)
