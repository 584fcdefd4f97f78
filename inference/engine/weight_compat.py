"""Weights as the installed mlx-lm reads them, where transformers 5 saves a family's tensors in a
layout mlx-lm's ``sanitize`` does not know (the weight-side peer of ``config_compat``).

- ``gpt_oss``: transformers saves unquantized experts fused and transposed,
  ``experts.gate_up_proj`` of ``[experts, hidden, 2 x intermediate]`` (gate and up interleaved)
  and ``experts.down_proj`` of ``[experts, intermediate, hidden]``, plus ``*_bias`` tensors.
  mlx-lm 0.32 reads openai's MXFP4 blocks (``[experts, out, in]``) or separate
  ``{gate,up,down}_proj.{weight,bias}``; given transformers' tensors it splits the wrong axis.
  ``model_classes`` hands mlx-lm a model whose ``sanitize`` first rewrites them to the latter.
"""

import mlx.core as mx
from mlx_lm.utils import _get_classes


def model_classes(config: dict):
    """mlx-lm's (Model, ModelArgs) for ``config``; the Model's ``sanitize`` also accepts
    transformers' layout where this module knows it (``mlx_lm.utils.load_model``'s
    ``get_model_classes``)."""
    model_class, args_class = _get_classes(config)
    rewrite = _REWRITES.get(config.get("model_type"))
    if rewrite is None:
        return model_class, args_class

    class Model(model_class):
        def sanitize(self, weights):
            return super().sanitize(rewrite(weights))

    Model.__name__ = Model.__qualname__ = model_class.__name__
    Model.__module__ = model_class.__module__
    return Model, args_class


def _gpt_oss_experts(weights: dict) -> dict:
    if not any(k.endswith("experts.gate_up_proj") for k in weights):
        return weights
    out = {}
    for key, value in weights.items():
        prefix = key.rpartition(".")[0] + "."
        if key.endswith("experts.gate_up_proj"):
            value = mx.swapaxes(value, -1, -2)  # [experts, 2 x intermediate, hidden]
            out[prefix + "gate_proj.weight"] = mx.contiguous(value[..., ::2, :])
            out[prefix + "up_proj.weight"] = mx.contiguous(value[..., 1::2, :])
        elif key.endswith("experts.gate_up_proj_bias"):
            out[prefix + "gate_proj.bias"] = mx.contiguous(value[..., ::2])
            out[prefix + "up_proj.bias"] = mx.contiguous(value[..., 1::2])
        elif key.endswith("experts.down_proj"):
            out[prefix + "down_proj.weight"] = mx.contiguous(mx.swapaxes(value, -1, -2))
        elif key.endswith("experts.down_proj_bias"):
            out[prefix + "down_proj.bias"] = value
        else:
            out[key] = value
    return out


_REWRITES = {"gpt_oss": _gpt_oss_experts}
