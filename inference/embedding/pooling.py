"""How a sentence embedding is made from hidden states: the pooling mode and normalisation.

Read from a sentence-transformers folder when there is one (``modules.json``: a ``Pooling``
module's ``config.json`` gives the mode, a ``Normalize`` module turns L2 normalisation on);
otherwise the family's convention: mean over the tokens for encoders, the last token for
LLM-based embedders, normalised in both cases (as OpenAI's embeddings are).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx

MODES = ("mean", "cls", "max", "lasttoken")
_ST_FLAGS = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_lasttoken": "lasttoken",
}
_KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True)
class Pooling:
    mode: str  # one of MODES
    normalize: bool

    @classmethod
    def of_folder(cls, path: Path, llm_based: bool) -> "Pooling":
        """The folder's pooling; ValueError for a sentence-transformers pipeline omlx cannot run
        (an unknown pooling mode, a Dense or other extra module)."""
        modules_file = path / "modules.json"
        if not modules_file.is_file():
            return cls("lasttoken" if llm_based else "mean", True)
        modules = json.loads(modules_file.read_text())
        mode, normalize = None, False
        for module in modules:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind not in _KNOWN_MODULES:
                raise ValueError(f"modules.json: the sentence-transformers module {kind!r} is not supported")
            if kind == "Normalize":
                normalize = True
            elif kind == "Pooling":
                mode = _pooling_mode(path / module.get("path", "") / "config.json")
        if mode is None:
            mode = "lasttoken" if llm_based else "mean"
        return cls(mode, normalize)

    def __call__(self, hidden: mx.array, mask: mx.array) -> mx.array:
        """[batch, length, hidden] and the [batch, length] mask (1 for real tokens, padding on
        the right) -> [batch, hidden] float32."""
        hidden = hidden.astype(mx.float32)
        maskf = mask.astype(mx.float32)[..., None]
        if self.mode == "cls":
            pooled = hidden[:, 0]
        elif self.mode == "mean":
            pooled = (hidden * maskf).sum(axis=1) / mx.maximum(maskf.sum(axis=1), 1.0)
        elif self.mode == "max":
            pooled = mx.where(maskf > 0, hidden, -mx.inf).max(axis=1)
        else:  # lasttoken: the last real token of each row (right padding)
            last = mask.astype(mx.int32).sum(axis=1) - 1
            pooled = mx.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
        if self.normalize:
            pooled = normalize(pooled)
        return pooled


def normalize(x: mx.array) -> mx.array:
    return x / mx.maximum(mx.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _pooling_mode(config_file: Path) -> str:
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if isinstance(config.get("pooling_mode"), str):
        mode = config["pooling_mode"].replace("_token", "")
        if mode not in MODES:
            raise ValueError(f"{config_file}: pooling mode {config['pooling_mode']!r} is not supported")
        return mode
    chosen = [mode for flag, mode in _ST_FLAGS.items() if config.get(flag)]
    others = [k for k, v in config.items() if k.startswith("pooling_mode_") and v and k not in _ST_FLAGS]
    if others or len(chosen) != 1:
        raise ValueError(
            f"{config_file}: pooling {others or chosen} is not supported (one of {', '.join(MODES)})"
        )
    return chosen[0]
