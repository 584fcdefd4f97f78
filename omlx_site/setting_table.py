"""The table of omlx's settings: one `Setting` row per setting (see omlx_site/config.py for where
their values come from and how a row becomes a flag, a Django setting and a line of
docs/settings.md; a row's fields: omlx_site/setting_row.py). Adding a setting is adding one row
here (or in the group's own module: omlx_site/setting_rows_memory.py: memory limits and the
memory guard; omlx_site/setting_rows_kv.py: the KV cache tiers; omlx_site/setting_rows_access.py:
keys, the browser boundary, Redis, image sources), then regenerating docs/settings.md
(``python -m omlx_site.config > docs/settings.md``)."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants as hf_constants

from omlx_site import setting_checks as checks
from omlx_site.setting_row import BOTH, Setting
from omlx_site.setting_rows_access import ACCESS, IMAGES
from omlx_site.setting_rows_kv import KV_CACHE
from omlx_site.setting_rows_memory import MEMORY
from omlx_site.setting_kinds import (
    BYTES,
    FILE,
    AUTO_FOLDER_OR_OFF,
    FOLDER_OR_OFF,
    FOLDERS,
    INTEGER,
    NUMBER,
    TEXT,
)


def _hf_hub_cache():
    """huggingface_hub's cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    return Path(hf_constants.HF_HUB_CACHE).expanduser()


# The order is the order of --help and of docs/settings.md.
SETTINGS: tuple[Setting, ...] = (
    Setting("host", "OMLX_HOST", TEXT, "127.0.0.1", "address to listen on", flag="--host", metavar="HOST"),
    Setting(
        "port",
        "OMLX_PORT",
        INTEGER,
        8000,
        "port; 0 picks a free one",
        flag="--port",
        check=checks.port,
        metavar="PORT",
    ),
    Setting(
        "model_dir",
        "OMLX_MODEL_DIR",
        FOLDERS,
        lambda home: [home / "models"],
        "folders of model folders, searched at depth 1 (DIR/name) and 2 (DIR/org/name); repeat the "
        "flag for several (the first with an id wins); the variable separates them with os.pathsep",
        flag="--model-dir",
        commands=BOTH,
        shown_default="$OMLX_HOME/models",
        applies="now",
    ),
    Setting(
        "hf_cache",
        "OMLX_HF_CACHE",
        FOLDER_OR_OFF,
        lambda home: _hf_hub_cache(),
        "the Hugging Face cache, whose models (ORG/NAME at the snapshot of refs/main) are served "
        "after the model folders'; 'off': not searched",
        flag="--hf-cache",
        commands=BOTH,
        shown_default="$HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub",
        applies="now",
    ),
    Setting(
        "lmstudio_models",
        "OMLX_LMSTUDIO_MODELS",
        AUTO_FOLDER_OR_OFF,
        "auto",
        "LM Studio's models folder (PUBLISHER/NAME): its MLX folders are served in place, its GGUF "
        "files listed to import; 'auto': ~/.lmstudio/models, else ~/.cache/lm-studio/models, if it "
        "exists; 'off': not searched",
        flag="--lmstudio-models",
        commands=BOTH,
    ),
    Setting(
        "ollama_models",
        "OMLX_OLLAMA_MODELS",
        AUTO_FOLDER_OR_OFF,
        "auto",
        "Ollama's models folder (manifests/ and blobs/): its models are listed by Ollama's names "
        "(llama3.2:3b) to import; 'auto': $OLLAMA_MODELS, else ~/.ollama/models, if it exists; "
        "'off': not searched",
        flag="--ollama-models",
        commands=BOTH,
    ),
    *MEMORY,
    Setting(
        "max_concurrent_requests",
        "OMLX_MAX_CONCURRENT_REQUESTS",
        INTEGER,
        16,
        "requests prefilling or decoding at once, per model",
        flag="--max-concurrent-requests",
        commands=BOTH,
        check=checks.engine("max_concurrent_requests"),
        applies="next load",
    ),
    Setting(
        "max_batch_wait_ms",
        "OMLX_MAX_BATCH_WAIT_MS",
        NUMBER,
        0,
        "how long a new request may be held so that it joins a batch with others, per model "
        "(milliseconds; admitted earlier when the waiting requests fill every free slot; 0 "
        "admits at once); embedding and reranker models: how long the first request waits "
        "for others to share its forward pass",
        flag="--max-batch-wait-ms",
        commands=BOTH,
        check=checks.engine("max_batch_wait_ms"),
        applies="next load",
    ),
    Setting(
        "max_step_ms",
        "OMLX_MAX_STEP_MS",
        NUMBER,
        0,
        "while requests decode, a step computes only the prompt tokens that keep it near this "
        "many milliseconds (from the speeds measured while serving), so streams keep a steady "
        "inter-token latency during long prefills; per model; 0: default-priority prompts are "
        "computed whole, one long prompt a step with a decode step between two, a background one "
        "targets 4 decode steps",
        flag="--max-step-ms",
        commands=BOTH,
        check=checks.engine("max_step_ms"),
        applies="next load",
    ),
    Setting(
        "speculative",
        "OMLX_SPECULATIVE",
        TEXT,
        "off",
        "speculative decoding, per model: off, lookup (drafts copied from the request's own "
        "prompt and output, checked in one pass of the decode batch; output unchanged), suffix "
        "(lookup, and drafts from the model's earlier answers of the same cache salt) or draft (a "
        "draft model's, --draft-model); a request may override it (docs/engine.md)",
        flag="--speculative",
        commands=BOTH,
        check=checks.engine("speculative"),
        applies="next load",
        metavar="off|lookup|suffix|draft",
    ),
    Setting(
        "draft_model",
        "OMLX_DRAFT_MODEL",
        TEXT,
        None,
        "the id of a served model of the same tokenizer that drafts for speculative=draft, loaded "
        "through the pool next to each model that has no draft_model setting of its own and kept "
        "loaded while they are (docs/engine.md)",
        flag="--draft-model",
        commands=BOTH,
        applies="next load",
        metavar="ID",
    ),
    Setting(
        "num_draft_tokens",
        "OMLX_NUM_DRAFT_TOKENS",
        INTEGER,
        4,
        "the most tokens a decoding request drafts per step when speculating, per model (1 to 16; "
        "fewer while its drafts are rejected)",
        flag="--num-draft-tokens",
        commands=BOTH,
        check=checks.engine("num_draft_tokens"),
        applies="next load",
    ),
    Setting(
        "step_trace",
        "OMLX_STEP_TRACE",
        INTEGER,
        0,
        "keep a record of each of the last N engine steps (rows decoding, prompt tokens, passes and "
        "where the step's time went), read at GET /v1/engine/step_trace; 0: off",
        flag="--step-trace",
        commands=BOTH,
        check=checks.engine("step_trace"),
        metavar="N",
        applies="next load",
    ),
    *KV_CACHE,
    *ACCESS,
    Setting(
        "workers",
        "OMLX_HUEY_WORKERS",
        INTEGER,
        None,
        "Huey worker threads inside the server; with Redis, 0: only `omlx worker` processes run requests",
        flag="--workers",
        check=checks.at_least(0),
        shown_default="2; with Redis 0",
    ),
    Setting(
        "max_request_size",
        "OMLX_MAX_REQUEST_BYTES",
        BYTES,
        32 * 2**20,
        "largest request body (bytes, 64KiB, 32MiB); larger ones get a 413",
        flag="--max-request-size",
        check=checks.request_size,
        shown_default="32MiB",
        applies="now",
    ),
    *IMAGES,
    Setting(
        "max_queued_requests",
        "OMLX_MAX_QUEUED_REQUESTS",
        INTEGER,
        256,
        "requests per model that may wait beyond --max-concurrent-requests; more get a 429",
        flag="--max-queued-requests",
        check=checks.at_least(0),
        applies="now",
    ),
    Setting(
        "response_ttl_days",
        "OMLX_RESPONSE_TTL_DAYS",
        NUMBER,
        30.0,
        "stored Responses (POST /v1/responses with store) older than this are gone (deleted hourly)",
        check=checks.positive,
        applies="now",
    ),
    Setting(
        "max_response_chain",
        "OMLX_MAX_RESPONSE_CHAIN",
        INTEGER,
        1000,
        "most stored responses a previous_response_id chain may replay; a longer chain gets a 400",
        check=checks.at_least(1),
        applies="now",
    ),
    Setting(
        "mcp_config",
        "OMLX_MCP_CONFIG",
        FILE,
        None,
        "MCP servers to start with the server, in Claude Desktop's mcpServers JSON (stdio: command, "
        "args, env; streamable HTTP: url, headers); their tools are served under /v1/mcp and offered "
        "in the console's chat. Needs the extra: pip install 'omlx[mcp]'",
        flag="--mcp-config",
        check=checks.mcp_config,
        console_editable=False,
    ),
    Setting(
        "distributed",
        "OMLX_DISTRIBUTED",
        FILE,
        None,
        "serve each text model split across the machines of this hosts file (mlx.launch's JSON: "
        'rank 0, this machine, first; [{"ssh": HOST, "ips": [IP]}, ...]; pipeline parallel, or '
        'tensor parallel with {"parallel": "tensor", "hosts": [...]}); the other ranks are '
        "started over ssh (or here, for loopback). See docs/operations.md",
        flag="--distributed",
        check=checks.distributed_hosts,
        console_editable=False,
        metavar="HOSTS.json",
    ),
    Setting(
        "distributed_timeout",
        "OMLX_DISTRIBUTED_TIMEOUT",
        NUMBER,
        120.0,
        "seconds an exchange of a step, or of a model's close (each rank writing its RAM blocks "
        "down), may wait for the other ranks of --distributed (loads are not timed): past it a rank "
        "is taken as hung, its requests fail and the model is down, or the close goes on without "
        "it. See docs/operations.md",
        flag="--distributed-timeout",
        check=checks.positive,
        console_editable=False,
    ),
    Setting(
        "mcp_tool_timeout",
        "OMLX_MCP_TOOL_TIMEOUT",
        NUMBER,
        60.0,
        "seconds an MCP tool call may take (POST /v1/mcp/execute may ask for less or more)",
        check=checks.positive,
    ),
    Setting(
        "retry_after_seconds",
        "OMLX_RETRY_AFTER_SECONDS",
        INTEGER,
        1,
        "the Retry-After (seconds) of a 429, and of a memory guard's 503 (at least 1)",
        check=checks.at_least(0),
        applies="now",
    ),
    Setting(
        "worker_heartbeat_seconds",
        "OMLX_WORKER_HEARTBEAT_SECONDS",
        NUMBER,
        15.0,
        "Redis mode: a worker whose heartbeat is older is gone (it renews it every third of this)",
        check=checks.positive,
    ),
    Setting(
        "sse_keepalive_seconds",
        "OMLX_SSE_KEEPALIVE_SECONDS",
        NUMBER,
        10.0,
        "idle seconds between keep-alive comments in a stream (ping events on /v1/messages)",
        check=checks.positive,
        applies="now",
    ),
    Setting(
        "huey_max_poll_delay",
        "OMLX_HUEY_MAX_POLL_DELAY",
        NUMBER,
        0.5,
        "longest wait (s) before an idle worker sees a new task (SQLite queues are polled)",
        check=checks.positive,
    ),
    Setting(
        "api_handoff",
        "OMLX_API_HANDOFF",
        TEXT,
        "huey",
        "'direct': the view hands requests to the engine itself, without the queue (for comparisons)",
        check=checks.one_of("huey", "direct"),
    ),
    Setting(
        "shutdown_grace_seconds",
        "OMLX_SHUTDOWN_GRACE_SECONDS",
        NUMBER,
        10.0,
        "on SIGTERM/SIGINT, how long running requests may go on before they are aborted",
        check=checks.at_least(0),
    ),
    Setting(
        "log_dir",
        "OMLX_LOG_DIR",
        FOLDER_OR_OFF,
        lambda home: home / "logs",
        "the JSON-lines logs: server.log (omlx serve), worker-PID.log (omlx worker); 'off': none",
        shown_default="$OMLX_HOME/logs",
    ),
    Setting(
        "log_max_bytes",
        "OMLX_LOG_MAX_BYTES",
        BYTES,
        10 * 2**20,
        "a log file is rotated (server.log.1, ...) when it would grow past this size",
        check=checks.positive,
    ),
    Setting(
        "log_backups",
        "OMLX_LOG_BACKUPS",
        INTEGER,
        5,
        "rotated log files kept per process",
        check=checks.at_least(0),
    ),
)
BY_KEY = {s.key: s for s in SETTINGS}
