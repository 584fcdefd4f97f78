"""Speculative decoding on every family of the test factory (inference.engine.speculative.rollback):
sliding windows (gemma3_text; gpt_oss, with experts), Gated DeltaNet (qwen3_5, whose layers
honour right padding: one padded replay), Mamba2 (nemotron_h, whose layers do not: a replay per
kept length) and a mixture of experts (qwen3_moe), float and 8-bit weights; the sliding-window
families with quantized KV too (gemma3_text at kv_bits 8 and 4, gpt_oss with its attention
sinks at 8: each quantized window's three rings rolled back alike), decoding past their window
of 16. Greedy output with prompt lookup equals plain decoding token for token, alone and next
to rows that do not speculate (greedy, and seeded sampling), and the counters show that drafts
were both kept and rejected, so verify passes with rejections rolled the caches back. With
small blocks, passes that end on a block boundary leave the snapshots the block cache needs: a
next turn served from it decodes as one computed cold. Preempted rows and stop tokens inside
accepted drafts too."""

import pytest

from inference.engine import LLM, SamplingParams

GREEDY = dict(temperature=0, ignore_eos=True)
LOOKUP = dict(speculative="lookup", num_draft_tokens=4)
# Per family, prompts on which its random model repeats itself now and then (found by a scan
# of its greedy outputs): lookup's drafts are then sometimes kept, often rejected.
PROMPTS = {
    "gemma3_text": [
        [20, 21, 22, 23, 20, 21],
        [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9],
        [30, 31, 32, 33, 34, 30, 31],
    ],
    "gpt_oss": [
        [20, 21, 22, 23, 20, 21],
        [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9],
        [30, 31, 32, 33, 34, 30, 31],
    ],
    "qwen3_moe": [
        [20, 21, 22, 23, 20, 21],
        [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9],
        [30, 31, 32, 33, 34, 30, 31],
    ],
    "qwen3_5": [
        [825, 647, 359, 489, 634, 825],
        [158, 75, 186, 531, 410, 158, 75, 186, 531],
        [670, 201, 583] * 2,
    ],
    "nemotron_h": [
        [476, 292, 758, 841, 254, 476],
        [295, 132, 836] * 2,
        [481, 248, 556, 684, 51, 481, 248, 556, 684],
    ],
}
PLAIN_ROW = [50, 51, 52]  # the row that does not speculate


def family(model_dir, tmp_path_factory, arch, bits, kv_bits=None):
    if kv_bits:  # head dim 32: the preset's 16 is below any group
        return model_dir(arch=arch, preset="tiny", head_dim=32)
    if not bits:
        return model_dir(arch=arch, preset="tiny")
    from inference.testkit.registry import build_quantized

    return build_quantized(
        tmp_path_factory.mktemp(f"{arch}-q{bits}") / "q", bits, 32, arch=arch, preset="tiny"
    )


def always_speculate(llm):
    """Rows speculate whatever a verify pass costs (see test_speculative.always_speculate)."""
    llm.engine.call(lambda engine: setattr(engine.runner.speculation, "costs", None))


@pytest.mark.parametrize(
    "arch,bits,kv_bits",
    [
        ("gemma3_text", 0, None),
        ("gpt_oss", 0, None),
        ("qwen3_5", 0, None),
        ("nemotron_h", 0, None),
        ("qwen3_moe", 0, None),
        ("qwen3_5", 8, None),
        ("gemma3_text", 0, 8),
        ("gemma3_text", 0, 4),
        ("gpt_oss", 0, 8),
    ],
    ids=[
        "sliding",
        "sliding-moe",
        "gdn",
        "mamba",
        "moe",
        "gdn-q8",
        "sliding-kv8",
        "sliding-kv4",
        "sinks-kv8",
    ],
)
def test_greedy_lookup_equals_plain_on_every_family(model_dir, tmp_path_factory, arch, bits, kv_bits):
    prompts = PROMPTS[arch] + [PLAIN_ROW, PLAIN_ROW]
    lengths = (40, 33, 27)
    # Rows that do not speculate: greedy, and seeded sampling (verify passes carry them along).
    plain_rows = [
        SamplingParams(max_tokens=30, speculative="off", **GREEDY),
        SamplingParams(max_tokens=30, temperature=0.8, seed=3, ignore_eos=True, speculative="off"),
    ]
    path = family(model_dir, tmp_path_factory, arch, bits, kv_bits)
    kv = dict(kv_bits=kv_bits, kv_group_size=32) if kv_bits else {}
    with LLM(path, max_concurrent_requests=8, **kv) as llm:
        always_speculate(llm)
        want = llm.generate(prompts, [SamplingParams(max_tokens=n, **GREEDY) for n in lengths] + plain_rows)
        mixed = [SamplingParams(max_tokens=n, **GREEDY, **LOOKUP) for n in lengths] + plain_rows
        got = llm.generate(prompts, mixed, cache_salt="mixed")
        alone = llm.generate([prompts[0]], mixed[0], cache_salt="alone")[0]
        spec = llm.engine.stats().speculative
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    assert alone.token_ids == want[0].token_ids
    assert spec["verify_passes"] > 0 and 0 < spec["accepted_tokens"] < spec["drafted_tokens"]


@pytest.mark.parametrize(
    "arch,kv_bits",
    [("gemma3_text", None), ("qwen3_5", None), ("nemotron_h", None), ("gemma3_text", 4)],
    ids=["sliding", "gdn", "mamba", "sliding-kv4"],
)
def test_speculated_rows_leave_the_block_cache_exact(model_dir, tmp_path_factory, arch, kv_bits):
    """Blocks of 8 tokens: verify passes stop at block boundaries and snapshot the windows and
    states there (with kv_bits, a quantized window's three rings). A next turn that extends a
    speculated one is served from the block cache as far as after a plain turn, and decodes what
    it decodes computed from scratch (another cache_salt)."""
    prompts = PROMPTS[arch]
    path = family(model_dir, tmp_path_factory, arch, 0, kv_bits)
    kv = dict(kv_bits=kv_bits, kv_group_size=32) if kv_bits else {}
    with LLM(path, max_concurrent_requests=4, cache_block_size=8, **kv) as llm:
        always_speculate(llm)
        plain = llm.generate(prompts, SamplingParams(max_tokens=40, **GREEDY), cache_salt="plain")
        first = llm.generate(prompts, SamplingParams(max_tokens=40, **GREEDY, **LOOKUP), cache_salt="turns")
        assert [r.token_ids for r in first] == [r.token_ids for r in plain]
        follow = [p + r.token_ids + [20, 21] for p, r in zip(prompts, first)]
        warm = llm.generate(follow, SamplingParams(max_tokens=12, **GREEDY), cache_salt="turns")
        cold = llm.generate(follow, SamplingParams(max_tokens=12, **GREEDY), cache_salt="fresh")
        after_plain = llm.generate(follow, SamplingParams(max_tokens=12, **GREEDY), cache_salt="plain")
        spec = llm.engine.stats().speculative
    # As much of it served as after the same turn decoded plainly (a snapshot at every boundary).
    hits = [r.usage.cached_tokens for r in warm]
    assert hits == [r.usage.cached_tokens for r in after_plain]
    assert all(n >= len(p) + 32 for p, n in zip(prompts, hits))
    assert all(r.usage.cached_tokens == 0 for r in cold)
    assert [r.token_ids for r in warm] == [r.token_ids for r in cold]
    assert spec["accepted_tokens"] > 0


@pytest.mark.parametrize(
    "arch,kv_bits",
    [("gemma3_text", None), ("qwen3_5", None), ("nemotron_h", None), ("gemma3_text", 8)],
    ids=["sliding", "gdn", "mamba", "sliding-kv8"],
)
def test_preempted_and_stopped_speculating_rows_decode_as_plain(model_dir, tmp_path_factory, arch, kv_bits):
    """Rows preempted for KV room (caches dropped, recomputed later) and speculating after it,
    two of them ending on a stop token that comes late in their output: the tokens and finish
    reasons of plain decoding without preemption (with kv_bits: the same KV format in both)."""
    path = family(model_dir, tmp_path_factory, arch, 0, kv_bits)
    kv = dict(kv_bits=kv_bits, kv_group_size=32) if kv_bits else {}
    prompts = PROMPTS[arch] + [PLAIN_ROW]
    with LLM(path, max_concurrent_requests=4, **kv) as roomy:
        want = roomy.generate(prompts, SamplingParams(max_tokens=40, **GREEDY))
    params = []
    for i, r in enumerate(want):
        late = [t for t in r.token_ids[24:] if t not in r.token_ids[:24]]
        stop = [late[0]] if i % 2 and late else []
        params.append(SamplingParams(max_tokens=40, stop_token_ids=stop, **GREEDY, **LOOKUP))
    with LLM(path, max_kv_tokens=100, max_concurrent_requests=4, **kv) as tight:
        always_speculate(tight)
        got = tight.generate(prompts, params)
        assert tight.engine.scheduler.num_preemptions > 0
        assert tight.engine.stats().speculative["verify_passes"] > 0
    for p, w, g in zip(params, want, got):
        if p.stop_token_ids:
            end = w.token_ids.index(p.stop_token_ids[0]) + 1
            assert (g.token_ids, g.finish_reason) == (w.token_ids[:end], "stop")
        else:
            assert (g.token_ids, g.finish_reason) == (w.token_ids, "length")
