"""The benchmark of issue 6, without Django: targets (``targets``: this process's engines or
model pool, or any OpenAI-compatible URL), scenarios and results (``runner``; the agentic
load of issues 12 and 24, closed loop or bursts: ``agentic``, its prompts ``agentic_prompts``; the
quality suite of issue 26: ``accuracy`` over ``perplexity``, ``humaneval`` and ``sandbox``), percentiles
(``stats``) and the PNG plot of `omlx bench` (``plot``). The admin page runs it as a Huey task
(``admin_panel.tasks``); `omlx bench` runs it in the terminal (omlx_site/commands/bench.py).
docs/cli.md and docs/admin.md describe the scenarios for users."""

from .accuracy import ACCURACY_PRESETS, AccuracySettings, run_accuracy
from .agentic import AGENTIC_PRESETS, AgenticSettings, plan_bursts, run_agentic
from .runner import PRESETS, RESULTS_VERSION, BenchSettings, parse_concurrency, run_benchmark
from .targets import EngineTarget, OpenAITarget, PoolTarget, StreamResult, Target, TargetError

__all__ = [
    "ACCURACY_PRESETS",
    "AccuracySettings",
    "run_accuracy",
    "AGENTIC_PRESETS",
    "AgenticSettings",
    "plan_bursts",
    "run_agentic",
    "PRESETS",
    "RESULTS_VERSION",
    "BenchSettings",
    "EngineTarget",
    "OpenAITarget",
    "PoolTarget",
    "StreamResult",
    "Target",
    "TargetError",
    "parse_concurrency",
    "run_benchmark",
]
