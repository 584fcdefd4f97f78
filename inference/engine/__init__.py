"""The MLX engine: continuous batching over mlx-lm models.

from inference.engine import LLM, SamplingParams
llm = LLM("path/to/model", max_concurrent_requests=8)
print(llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=32))[0].text)
"""

from .config import EngineConfig
from .engine import Engine, RequestStream
from .llm import LLM, GenerationResult
from .model_loader import ModelLoadError, load_model
from .request import RequestOutput, TokenLogprob, Usage
from .sampling_params import SamplingParams
from .stats import EngineStats

__all__ = [
    "LLM",
    "SamplingParams",
    "Engine",
    "EngineConfig",
    "RequestStream",
    "RequestOutput",
    "GenerationResult",
    "TokenLogprob",
    "Usage",
    "ModelLoadError",
    "load_model",
    "EngineStats",
]
