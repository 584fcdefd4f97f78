"""Reference outputs computed with HF transformers (PyTorch, float32)."""

import torch
from transformers import AutoModelForCausalLM


def hf_next(model, out, token):
    """One more token through an HF model, reusing its KV (the kwarg is ``cache`` in newer
    transformers, ``past_key_values`` before)."""
    if "cache" in out:
        return model(torch.tensor([[token]]), cache=out["cache"], use_cache=True)
    return model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)


def hf_greedy(path, prompts, n, load=None, stepwise=False):
    """Greedy continuations of ``prompts`` (n tokens each), one prompt at a time; ``load(path)``
    builds the model (default: ``AutoModelForCausalLM.from_pretrained`` in float32).
    ``stepwise`` feeds the prompt one token at a time (the model's recurrent path) instead of
    in one forward pass."""
    if load is not None:
        model = load(path)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    outputs = []
    with torch.no_grad():
        for prompt in prompts:
            if stepwise:
                out = model(torch.tensor([prompt[:1]]), use_cache=True)
                for token in prompt[1:]:
                    out = hf_next(model, out, token)
            else:
                out = model(torch.tensor([prompt]), use_cache=True)
            generated = []
            for _ in range(n):
                token = int(out.logits[0, -1].argmax())
                generated.append(token)
                out = hf_next(model, out, token)
            outputs.append(generated)
    return outputs
