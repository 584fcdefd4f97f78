"""A test model that writes a given text: weights built, not drawn, so that greedy decoding after
the chat template's generation prompt produces exactly ``script``, then the end-of-sequence token.

``build_scripted_model(path, script, arch="qwen3")`` writes a folder of the same format as
``inference.testkit.registry.build_model`` (config.json, model.safetensors with Hugging Face names,
the family's tokenizer and chat template), loaded by the same loaders (mlx-lm, transformers) with
no code of its own. It exists so that tests see a model *write* tool-call markup, reasoning blocks
and end-of-sequence, which the random models never do.

Construction (one decoder layer; every weight is set, none is random):

- The text ``Z`` = G + the script's tokens, where G is the suffix that every prompt rendered by the
  family's chat template with ``add_generation_prompt`` ends with (for qwen3:
  ``<|im_end|>\\n<|im_start|>assistant\\n<think>\\n``). Each position of Z from G's last token on
  is keyed by a "window", the shortest run of tokens ending there (2 at least, where Z has them)
  that no position with another successor ends with; its successor is the next script token, or
  ``<|im_end|>`` after the last one. K + 1 is the longest window (at most 33 tokens).
- Embeddings: a constant unit in dimension 0 plus a one-hot "slot" of the token (one slot per
  distinct token of Z, one shared slot for every other token), so every row has the same norm
  and RMSNorm leaves the code unchanged up to one constant.
- Attention: query head h (h = 1..K) attends to the token h positions back, by position alone:
  q and k read only the constant dimension, so they are the same vectors at every position, and
  RoPE (base 2, every frequency between 0.5 and 1 rad) turns q.k into sum_i cos(theta_i (d - h))
  for a distance d, largest at d = h with a margin of 41 logits over every other distance up to
  40,000 (checked at build time), so each head's softmax is one-hot in float32. Values carry
  the slot code; o_proj writes head h's into its own block of the residual.
- MLP: one unit per window, gate = 40 * (number of the window's L slots that match - L + 0.5)
  (the constant dimension gives the bias), so silu fires (+20) only on a full match and is below
  1e-7 otherwise; down_proj writes the unit into the output block at its successor's slot.
- lm_head reads the output block, one row per successor, and gives ``<|im_end|>`` a small logit
  from the constant dimension, so a context that matches no window ends the turn.

Limits: the whole script plays after the family's default generation prompt. A prompt that ends
otherwise gets ``<|im_end|>`` at once, unless it ends with one of the script's windows: then the
script goes on from there as far as the next windows match (qwen3 with ``enable_thinking`` false
ends ``</think>\\n\\n``, so a script of reasoning, ``</think>\\n\\n`` and an answer writes the
answer). Windows are checked against Z only: one that reaches back past Z's start into the
conversation could also match there (a script that repeats the generation prompt's end). A
script that repeats a run of 33 tokens with different successors cannot be keyed and raises
ValueError, as does one of more than 127 distinct tokens. Prompts up to 4,096 tokens
(max_position_embeddings; the attention margin holds to 40,000). Greedy only: the other logits
are 0, so sampling at temperature 1 often picks other tokens.
"""

from pathlib import Path

import numpy as np

from inference.testkit.base import DTYPES, EOS, require_test_extra, write_json, write_weights
from inference.testkit.text import ARCHITECTURES as HAND_WRITTEN
from inference.testkit.text import build_config
from inference.testkit.tokenizer import write_tokenizer

_ROPE_BASE = 2.0  # frequencies 2**(-2i/head_dim): all in (0.5, 1] rad per position
_PEAK = 160.0  # attention logit at the wanted distance
_MIN_MARGIN = 30.0  # over every other distance up to _CHECKED_DISTANCE
_CHECKED_DISTANCE = 40_000
_GATE = 40.0  # MLP gate scale: full match +20, any mismatch <= -20
_MAX_WINDOW = 33  # tokens a window may span: 32 attention heads at most
_MAX_POSITIONS = 4096  # as the tiny preset: the memory estimate grows with it


def build_scripted_model(path, script, arch="qwen3", seed=0, dtype="float32") -> Path:
    """Write a model folder of ``arch`` (llama, mistral, qwen2, qwen3) whose greedy output after
    the chat template's generation prompt is ``script`` then ``<|im_end|>``; return ``path``.

    ``script`` is text; the family's special tokens in it (``<tool_call>``, ``</think>``...) are
    written as those tokens. ``seed`` only seeds the tokenizer's training corpus. ValueError for
    an unknown arch or dtype, an empty script, or one that cannot be keyed (see the module doc).
    """
    if arch not in HAND_WRITTEN:
        raise ValueError(f"a scripted model is one of {HAND_WRITTEN}, not {arch!r}")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {tuple(DTYPES)}")
    if not script:
        raise ValueError("the script is empty")
    path = Path(path)
    vocab = write_tokenizer(path, arch, 1024, seed)
    prefix, tokens = _generation_suffix(path), _encode(path, script)
    eos = vocab[EOS]
    plan = _plan(prefix, tokens, eos)
    head_dim = 64 if plan["slots"] <= 64 else 128
    layout = 1 + (plan["k"] + 1) * plan["slots"] + len(plan["outputs"])
    heads = max(plan["k"], -(-layout // head_dim))
    overrides = dict(
        hidden_size=heads * head_dim,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=1,
        intermediate_size=-(-len(plan["units"]) // 64) * 64,
        vocab_size=1024,
        max_position_embeddings=_MAX_POSITIONS,
        rope_theta=_ROPE_BASE,
    )
    if arch != "qwen2":
        overrides["head_dim"] = head_dim
    config = build_config(arch, "tiny", dtype, overrides)
    write_json(path / "config.json", config)
    write_json(
        path / "generation_config.json",
        {
            "bos_token_id": config["bos_token_id"],
            "eos_token_id": config["eos_token_id"],
            "pad_token_id": config["bos_token_id"],
        },
    )
    write_weights(path, _weights(arch, config, plan, len(vocab), eos), dtype)
    return path


def _tokenizer(path):
    require_test_extra("building a scripted model", ("transformers",))
    from transformers import PreTrainedTokenizerFast  # a dependency of mlx-lm: installed with it

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def _encode(path, text):
    return _tokenizer(path).encode(text, add_special_tokens=False)


def _generation_suffix(path):
    """Token ids every generation prompt of the folder's template ends with (the common suffix
    of two prompts that differ only in the user's text)."""
    tokenizer = _tokenizer(path)
    a, b = (
        tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True
        )
        for text in ("alpha", "omega 7")
    )
    a, b = list(getattr(a, "input_ids", a)), list(getattr(b, "input_ids", b))
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def _plan(prefix, tokens, eos):
    """K, the slots (token id -> slot; slot 0 is every other token), the windows as MLP units
    ((slot per offset 0, 1, ...), output index) and the output tokens.

    Each position p of Z from G's last token on gets the shortest window (at least 2 tokens where
    Z has them) that no position with another successor ends with, looking only at windows
    inside Z: so at every step of the script exactly the units of its successor fire.
    """
    z = list(prefix) + list(tokens)
    ends = range(len(prefix) - 1, len(z))
    successor = {p: z[p + 1] if p + 1 < len(z) else eos for p in ends}
    windows = {}  # window -> successor
    for p in ends:
        rivals = [q for q in ends if successor[q] != successor[p]]
        for length in range(min(2, p + 1), min(p + 1, _MAX_WINDOW) + 1):
            window = z[p - length + 1 : p + 1]
            if not any(q - length + 1 >= 0 and z[q - length + 1 : q + 1] == window for q in rivals):
                windows[tuple(window)] = successor[p]
                break
        else:
            raise ValueError(
                f"cannot key this script: the last {min(p + 1, _MAX_WINDOW)} tokens before its token "
                f"{p - len(prefix) + 1} occur again with another token after them"
            )
    k = max(map(len, windows)) - 1
    distinct = sorted(set(z))
    if len(distinct) > 127:
        raise ValueError(f"the script and prompt suffix have {len(distinct)} distinct tokens; at most 127")
    slots = {token: i + 1 for i, token in enumerate(distinct)}
    outputs = sorted(set(windows.values()))
    units = [
        (tuple(slots[t] for t in reversed(window)), outputs.index(next_token))
        for window, next_token in windows.items()
    ]  # offsets 0 (current), 1, 2, ...
    return dict(k=k, slots=len(distinct) + 1, units=units, outputs=outputs, slot_of=slots)


def rope_scores(head_dim, shift, distances):
    """Attention logit of a head keyed ``shift`` positions back, at each of ``distances``."""
    theta = _ROPE_BASE ** (-np.arange(0, head_dim, 2) / head_dim)
    return _PEAK / len(theta) * np.cos(np.outer(np.asarray(distances) - shift, theta)).sum(1)


def _check_margin(head_dim, k):
    distances = np.arange(0, _CHECKED_DISTANCE)
    for shift in range(1, k + 1):
        scores = rope_scores(head_dim, shift, distances)
        if _PEAK - np.delete(scores, shift).max() < _MIN_MARGIN:
            raise AssertionError("the RoPE attention margin is too small")  # a bug in the constants


def _weights(arch, config, plan, vocab_len, eos):
    """Yield (name, float32 array) in Hugging Face order and naming (as text._weights)."""
    d, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = d // heads if config.get("head_dim") is None else config["head_dim"]
    kv_dim = config["num_key_value_heads"] * head_dim
    k, n_slots, outputs = plan["k"], plan["slots"], plan["outputs"]
    _check_margin(head_dim, k)
    cur = 1  # residual blocks: [constant | current slot | slot h back, h = 1..K | outputs]
    back = [cur + h * n_slots for h in range(k + 1)]  # back[0] is the current token's block
    out = cur + (k + 1) * n_slots
    # Every embedding row has norm sqrt(2): the input RMSNorm divides by rms1.
    rms1 = np.sqrt(2.0 / d)
    embed = np.zeros((config["vocab_size"], d), np.float32)
    embed[:vocab_len, 0] = 1.0
    embed[:vocab_len, cur] = 1.0  # slot 0: every token not in the script
    for token, slot in plan["slot_of"].items():
        embed[token, cur] = 0.0
        embed[token, cur + slot] = 1.0
    yield "model.embed_tokens.weight", embed
    layer = "model.layers.0."
    yield layer + "input_layernorm.weight", np.ones(d, np.float32)

    # q and k: per frequency pair (x, y) of RoPE's rotate-half layout, k = (1, 0) and head h's
    # q = (cos(theta h), -sin(theta h)), so q.k after rotation is cos(theta (distance - h)).
    half = head_dim // 2
    theta = _ROPE_BASE ** (-np.arange(0, head_dim, 2) / head_dim)
    amplitude = np.sqrt(_PEAK * np.sqrt(head_dim) / half)  # of q and of k, per dimension pair
    qk_norm = arch == "qwen3"
    q_scale = 1.0 if qk_norm else amplitude * rms1  # x[0] = 1 / rms1
    q = np.zeros((heads * head_dim, d), np.float32)
    for h in range(1, k + 1):
        row = (h - 1) * head_dim
        q[row : row + half, 0] = np.cos(theta * h) * q_scale
        q[row + half : row + head_dim, 0] = -np.sin(theta * h) * q_scale
    kw = np.zeros((kv_dim, d), np.float32)
    kw[:half, 0] = q_scale
    v = np.zeros((kv_dim, d), np.float32)
    for slot in range(n_slots):
        v[slot, cur + slot] = rms1  # 1 where the token holds the slot
    for name, weight in (("q", q), ("k", kw), ("v", v)):
        yield layer + f"self_attn.{name}_proj.weight", weight
        if arch == "qwen2":
            yield layer + f"self_attn.{name}_proj.bias", np.zeros(len(weight), np.float32)
    if qk_norm:
        # RMSNorm makes q's and k's used halves sqrt(2) (half of the dimensions are 0 in k, and
        # in q the pairs have norm 1): the weight brings them to ``amplitude``.
        norm = np.full(head_dim, amplitude / np.sqrt(2.0), np.float32)
        yield layer + "self_attn.q_norm.weight", norm
        yield layer + "self_attn.k_norm.weight", norm
    o = np.zeros((d, heads * head_dim), np.float32)
    for h in range(1, k + 1):
        for slot in range(n_slots):
            o[back[h] + slot, (h - 1) * head_dim + slot] = 1.0
    yield layer + "self_attn.o_proj.weight", o
    yield layer + "post_attention_layernorm.weight", np.ones(d, np.float32)

    # After attention the residual is 1 in the constant dimension and in one slot of each of the
    # K + 1 blocks: norm sqrt(K + 2), so the normalised input is residual / rms2.
    rms2 = np.sqrt((k + 2.0) / d)
    inter = config["intermediate_size"]
    gate, up, down = (
        np.zeros((inter, d), np.float32),
        np.zeros((inter, d), np.float32),
        np.zeros((d, inter), np.float32),
    )
    for unit, (window_slots, output) in enumerate(plan["units"]):
        for h, slot in enumerate(window_slots):
            gate[unit, back[h] + slot] = _GATE * rms2
        gate[unit, 0] = -_GATE * (len(window_slots) - 0.5) * rms2
        up[unit, 0] = rms2
        down[out + output, unit] = 1.0
    yield layer + "mlp.gate_proj.weight", gate
    yield layer + "mlp.up_proj.weight", up
    yield layer + "mlp.down_proj.weight", down
    yield "model.norm.weight", np.ones(d, np.float32)
    head = np.zeros((config["vocab_size"], d), np.float32)
    for i, token in enumerate(outputs):
        head[token, out + i] = 1.0
    head[eos, 0] = 1.0  # a context that matches no window: end the turn (a fired unit gives ~20)
    yield "lm_head.weight", head
