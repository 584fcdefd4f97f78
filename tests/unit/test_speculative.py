"""Speculative decoding (inference.engine.speculative): greedy output with prompt lookup equals
plain decoding token for token (alone, next to rows that do not speculate, with stops and
max_tokens, on a quantized model), and rejection sampling leaves the sampled distribution as it
is (chi-squared over many seeds, on a small vocabulary)."""

import mlx.core as mx
import numpy as np
import pytest
from scipy.stats import chisquare

from inference.engine import LLM, EngineConfig, SamplingParams
from inference.engine.request import Request
from inference.engine.sampler import RowState
from inference.engine.speculative import SpeculationPolicy
from inference.engine.step_costs import StepCosts
from inference.engine.speculative.acceptance import sampled_tokens, sampling_arrays
from inference.engine.speculative.prompt_lookup import PromptLookupDrafter

GREEDY = dict(temperature=0, ignore_eos=True)
LOOKUP = dict(speculative="lookup", num_draft_tokens=4)
# Prompts that repeat themselves: the tiny random model loops on them, so drafts are accepted.
PROMPTS = [[20, 21, 22, 23, 20, 21], [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9], [30, 31, 32, 33, 34, 30, 31]]


def always_speculate(llm):
    """Drop the policy's plain-step cost: rows then speculate whatever a verify pass costs (on a
    tiny model the cost rule may turn them off; these tests are about what comes out)."""
    llm.engine.call(lambda engine: setattr(engine.runner.speculation, "costs", None))


def counters(llm) -> dict:
    return llm.engine.stats().speculative


@pytest.fixture(scope="module")
def llm(model_dir):
    with LLM(model_dir(arch="llama", preset="tiny"), max_concurrent_requests=8) as llm:
        always_speculate(llm)
        yield llm


def test_prompt_lookup_copies_what_followed_the_latest_longest_match():
    drafter = PromptLookupDrafter(max_ngram=3)
    drafter.extend([1, 2, 3, 9, 9, 2, 3, 4, 5, 1, 2, 3])
    assert drafter.propose(3) == [9, 9, 2]  # the longest match [1, 2, 3], not the later [2, 3]
    drafter.extend([7])
    assert drafter.propose(3) == []  # 7 never occurred before
    drafter.extend([1])
    assert drafter.propose(2) == [2, 3]  # the 1-gram [1]: most recent earlier occurrence
    assert drafter.propose(0) == [] and drafter.seen == 14
    looping = PromptLookupDrafter()
    looping.extend([8, 4, 5, 4, 5])
    assert looping.propose(5) == [4, 5, 4, 5, 4]  # a loop continues past the end of its last turn


def test_prompt_lookup_follows_a_long_copy_over_the_latest_short_match():
    """Two variants of one stretch (a file of similar functions): the answer copies the first.
    Past the shared part, the latest 3-gram points into the second variant; the copy that has
    matched ``follow`` tokens or more keeps proposing the first. A shorter copy does not; a
    token that breaks the copy ends it."""
    drafters = {}
    for shared, proposed, match in ((8, [41, 50, 51], 9), (6, [42, 50, 51], 3)):
        common = list(range(1, shared + 1))
        first, second = [100, *common, 41, 50, 51], [200, *common, 42, 50, 51]
        drafter = drafters[shared] = PromptLookupDrafter(max_ngram=3, follow=8)
        drafter.extend(first + second + [7, 7])
        drafter.extend([100])
        assert drafter.propose(2) == [1, 2]  # the copy of ``first`` starts here
        drafter.extend(common)  # it has matched 1 + shared tokens now
        assert drafter.propose(3) == proposed
        assert drafter.lookup(1)[0] == match  # (the followed copy's length, or the 3-gram's)
    drafter = drafters[8]
    drafter.extend([43])  # neither variant: the copy ends, and nothing matches (43 is new)
    assert drafter.propose(3) == []
    drafter.extend([50])
    assert drafter.propose(2) == [51, 7]  # the latest 1-gram again


def test_a_row_that_does_not_pay_decodes_plainly_until_its_shadow_drafts_would():
    """The adaptive rule: a verify pass that costs more than the tokens it gave turns the row's
    drafting off (shadow); proposals checked on the host against the tokens that came turn it
    back on once the expected tokens per pass pay for a verify pass."""
    costs = StepCosts()
    costs.decode_seconds = 1.0
    policy = SpeculationPolicy("lookup", 4, costs)
    policy.verify_seconds = 2.0
    loop = [1, 2, 3, 4, 5, 6]
    looping, wandering = (
        Request(f"r{i}", loop * 2, SamplingParams(max_tokens=100, **GREEDY), None, frozenset(), None, 0)
        for i in range(2)
    )
    rows = [looping, wandering]
    assert policy.wanted(rows, None)
    assert policy.drafts(rows, None) == [[1, 2, 3, 4]] * 2
    policy.observe(rows, [[1, 2, 3, 4]] * 2, [0, 0], 2.0)  # nothing kept: 1.4 tokens a pass < 2
    assert not policy.wanted(rows, None) and policy.drafts(rows, None) == [[], []]
    looping.output_token_ids += [1, 2]  # the shadow proposal [1, 2, 3, 4] is not decided yet
    wandering.output_token_ids += [9, 8]  # ... it is wrong
    assert not policy.wanted(rows, None)
    looping.output_token_ids += [3, 4, 5]  # it came true: the row pays again
    wandering.output_token_ids += [7, 1, 2]
    policy.position_seconds = None  # (not the batch's width rule: tests/unit/test_speculative_width.py)
    assert policy.wanted(rows, None) and policy.drafts(rows, None) == [[6, 1, 2, 3], []]


def test_greedy_lookup_equals_plain_in_a_mixed_batch(llm):
    """Speculating rows of different lengths (different numbers of rejected positions per row:
    the rollback trims and rolls) next to a greedy and a seeded sampling row that do not
    speculate: every row decodes what plain decoding gives."""
    prompts = PROMPTS + [[40, 41, 40, 41], [50, 51, 52]]
    plain = [SamplingParams(max_tokens=n, **GREEDY) for n in (40, 33, 27)]
    plain += [SamplingParams(max_tokens=30, **GREEDY), SamplingParams(max_tokens=30, temperature=0.8, seed=3)]
    want = llm.generate(prompts, plain)
    before = counters(llm)
    mixed = [SamplingParams(max_tokens=p.max_tokens, **GREEDY, **LOOKUP) for p in plain[:3]]
    mixed += [SamplingParams(max_tokens=30, speculative="off", **GREEDY), plain[4]]
    got = llm.generate(prompts, mixed)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    assert [r.finish_reason for r in got] == ["length"] * 5
    after = counters(llm)
    assert after["accepted_tokens"] > before["accepted_tokens"]
    assert after["verify_passes"] - before["verify_passes"] < 40  # fewer passes than tokens
    # A seeded sampling row that speculates (rejection sampling) gives the same tokens when run
    # again in the same company (which steps it drafts in depends on the other rows: engine.md).
    sampled = SamplingParams(max_tokens=30, temperature=0.8, seed=5, ignore_eos=True, **LOOKUP)
    alone = llm.generate([PROMPTS[0]], sampled)[0].token_ids
    assert llm.generate([PROMPTS[0]], sampled)[0].token_ids == alone
    together = llm.generate([PROMPTS[0]] + prompts, [sampled] + mixed)[0].token_ids
    assert llm.generate([PROMPTS[0]] + prompts, [sampled] + mixed)[0].token_ids == together


def test_free_text_runs_the_passes_and_steps_of_plain_decoding(model_dir):
    """Free text (a prompt without repetition, near-uniform sampling: drafts are proposed, from
    1-gram matches, and rejected) with lookup on runs as many forward passes and report-only
    steps as with lookup off: drafting one step late keeps the pipeline, a pass that keeps no
    draft emits one token as a plain one does."""
    prompt = list(range(4, 400))
    with LLM(model_dir(arch="llama", preset="tiny-close"), max_concurrent_requests=2) as llm:
        always_speculate(llm)
        steps = {}
        for method in ("off", "lookup"):
            before = llm.engine.call(lambda e: (e.runner.batch.passes, e.runner.batch.reports))
            params = [
                SamplingParams(max_tokens=48, temperature=1.0, seed=s, ignore_eos=True, speculative=method)
                for s in (1, 2)
            ]
            llm.generate([prompt, prompt[::-1]], params)
            after = llm.engine.call(lambda e: (e.runner.batch.passes, e.runner.batch.reports))
            steps[method] = (after[0] - before[0], after[1] - before[1])
        spec = counters(llm)
    assert spec["verify_passes"] > 0 and spec["accepted_tokens"] == 0
    assert steps["lookup"] == steps["off"]


@pytest.mark.parametrize(
    "other",
    [
        dict(structured={"type": "json_object"}),
        dict(logprobs=2),
        dict(repetition_penalty=3.0),
    ],
    ids=["structured", "logprobs", "penalty"],
)
def test_a_row_a_verify_pass_cannot_serve_keeps_the_batch_plain(llm, other):
    """A row with a grammar, logprobs or penalties next to a speculating row: both get plain
    decoding's tokens (and logprobs), the batch decoding plainly while that row is in it."""
    prompts = [PROMPTS[2], PROMPTS[0]]  # the second loops: a penalty changes its tokens
    plain = [SamplingParams(max_tokens=30, **GREEDY), SamplingParams(max_tokens=30, **GREEDY, **other)]
    want = llm.generate(prompts, plain)
    plain[0].speculative = "lookup"
    got = llm.generate(prompts, plain)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    assert (got[1].logprobs is None) == (want[1].logprobs is None)
    # (a second run reads the prompt's KV from the block cache: logprobs agree to float rounding)
    assert [x.logprob for x in got[1].logprobs or []] == pytest.approx(
        [x.logprob for x in want[1].logprobs or []], abs=1e-3
    )


def test_preempted_speculating_rows_decode_as_plain(llm, model_dir):
    """Rows preempted for KV room (their caches dropped, recomputed later) and speculating
    after it: the tokens of plain decoding without preemption."""
    prompts = PROMPTS + [[40, 41, 40, 41]]
    want = llm.generate(prompts, SamplingParams(max_tokens=40, **GREEDY))
    with LLM(model_dir(arch="llama", preset="tiny"), max_kv_tokens=100, max_concurrent_requests=4) as tight:
        always_speculate(tight)
        got = tight.generate(prompts, SamplingParams(max_tokens=40, **GREEDY, **LOOKUP))
        assert tight.engine.scheduler.num_preemptions > 0 and counters(tight)["accepted_tokens"] > 0
    assert [r.token_ids for r in got] == [r.token_ids for r in want]


def test_a_stop_inside_accepted_tokens_ends_the_row_there(llm):
    """A stop token or stop string met among a pass's accepted tokens ends the row exactly where
    plain decoding ends it: no token after it is published or counted. (The model loops on
    this prompt: runs of one token that drafts keep, and stop strings that complete inside
    them.)"""
    prompt = PROMPTS[0]
    full = llm.generate([prompt], SamplingParams(max_tokens=40, **GREEDY))[0]
    stops = sorted({t for t in full.token_ids[3:]} - set(full.token_ids[:3]))
    params = [SamplingParams(max_tokens=40, stop_token_ids=[t], **GREEDY) for t in stops]
    loop = full.token_ids[-1]
    for n in range(3, 12):
        params.append(SamplingParams(max_tokens=40, stop=[llm.tokenizer.decode([loop] * n)], **GREEDY))
    want = llm.generate([prompt] * len(params), params)
    for p in params:
        p.speculative, p.num_draft_tokens = "lookup", 8
    got = llm.generate([prompt] * len(params), params)
    assert [(r.token_ids, r.text, r.finish_reason, r.usage.completion_tokens) for r in got] == [
        (r.token_ids, r.text, r.finish_reason, r.usage.completion_tokens) for r in want
    ]
    assert all(r.finish_reason == "stop" for r in got)


def test_max_tokens_caps_the_draft(llm):
    """A row never gets more tokens than max_tokens, and never drafts past it (the last prompt
    ends in the loop the model is in: its drafts would be as long as allowed)."""
    looping = PROMPTS[0] + llm.generate([PROMPTS[0]], SamplingParams(max_tokens=16, **GREEDY))[0].token_ids
    prompts = PROMPTS + [looping]
    for n in (1, 2, 3, 7):
        want = llm.generate(prompts, SamplingParams(max_tokens=n, **GREEDY))
        before = counters(llm)["drafted_tokens"]
        got = llm.generate(
            prompts, SamplingParams(max_tokens=n, num_draft_tokens=16, speculative="lookup", **GREEDY)
        )
        assert [r.token_ids for r in got] == [r.token_ids for r in want]
        assert all(len(r.token_ids) == n for r in got)
        assert counters(llm)["drafted_tokens"] - before <= len(prompts) * (n - 1)


def test_a_quantized_model_speculates_as_it_decodes(tmp_path_factory):
    from inference.testkit.registry import build_quantized

    path = build_quantized(tmp_path_factory.mktemp("q4") / "q4", 4, arch="llama", preset="tiny")
    with LLM(path, max_concurrent_requests=4, speculative="lookup") as q4:
        always_speculate(q4)
        want = q4.generate(PROMPTS, SamplingParams(max_tokens=30, speculative="off", **GREEDY))
        got = q4.generate(PROMPTS, SamplingParams(max_tokens=30, **GREEDY))
        assert [r.token_ids for r in got] == [r.token_ids for r in want]
        assert counters(q4)["accepted_tokens"] > 0


def test_rejection_sampling_keeps_the_distribution():
    """On an 8-token vocabulary with fixed logits at two positions and a draft of two tokens:
    over many seeds the first emitted token follows p0 and the second (after an accepted
    first) follows p1, both as chi-squared says (the draft tokens are each likely, not sure)."""
    logits = mx.array(
        [[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 3.0], [0.0, 2.5, 0.5, 1.0, 2.0, -1.0, 0.3, 0.1]] * 2
    )
    x = logits[:3] / 0.8
    p = np.array(mx.softmax(x, axis=-1)).astype(np.float64)
    p /= p.sum(axis=-1, keepdims=True)
    draft = [0, 4]
    params = SamplingParams(temperature=0.8)
    first, second = np.zeros(8), np.zeros(8)
    for seed in range(3000):
        row = RowState(params, seed, step=0)
        arrays = sampling_arrays(logits[:3], draft, row)
        tokens = sampled_tokens(*(a.tolist() for a in arrays), draft)
        first[tokens[0]] += 1
        if tokens[0] == draft[0]:
            second[tokens[1]] += 1
    assert 0 < first[0] < first.sum() and 0 < second[4] < second.sum()  # both kept and rejected
    assert chisquare(first, p[0] * first.sum()).pvalue > 1e-3
    assert chisquare(second, p[1] * second.sum()).pvalue > 1e-3


def test_bad_speculative_settings_are_refused():
    for bad in (dict(speculative="ngram"), dict(num_draft_tokens=17), dict(num_draft_tokens=True)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)
    for bad in (dict(speculative="on"), dict(num_draft_tokens=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            EngineConfig(**bad)


def test_the_block_cache_gets_only_the_tokens_a_speculated_row_kept(llm):
    """A row that stopped inside a pass's accepted tokens has KV past its end; what it leaves
    in the prefix cache stops at its tokens: the next turn, served from that cache, decodes
    what it decodes computed from scratch (another cache_salt)."""
    prompt, loop = PROMPTS[0], 57
    stop = llm.tokenizer.decode([loop] * 6)
    first = llm.generate([prompt], SamplingParams(max_tokens=40, stop=[stop], **GREEDY, **LOOKUP), "turns")[0]
    assert first.finish_reason == "stop"
    follow = prompt + first.token_ids + [20, 21]
    warm = llm.generate([follow], SamplingParams(max_tokens=12, **GREEDY), cache_salt="turns")[0]
    cold = llm.generate([follow], SamplingParams(max_tokens=12, **GREEDY), cache_salt="fresh")[0]
    assert warm.usage.cached_tokens > len(prompt) and cold.usage.cached_tokens == 0
    assert warm.token_ids == cold.token_ids


@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_kv_speculates_as_it_decodes(model_dir, bits):
    """With kv_bits, the batch's quantized caches roll back per row like float ones (trim by
    the least, roll the rest right): a mixed batch gives plain decoding's tokens."""
    prompts = PROMPTS + [[40, 41, 40, 41]]
    plain = [SamplingParams(max_tokens=n, **GREEDY) for n in (40, 33, 27, 30)]
    path = model_dir(arch="llama", preset="tiny", head_dim=32)  # the preset's 16 is below any group
    with LLM(path, max_concurrent_requests=8, kv_bits=bits, kv_group_size=32) as q:
        always_speculate(q)
        want = q.generate(prompts, plain)
        mixed = [SamplingParams(max_tokens=p.max_tokens, **GREEDY, **LOOKUP) for p in plain[:3]]
        mixed.append(SamplingParams(max_tokens=30, speculative="off", **GREEDY))
        got = q.generate(prompts, mixed, cache_salt="spec")
        assert [r.token_ids for r in got] == [r.token_ids for r in want]
        assert counters(q)["accepted_tokens"] > 0 and counters(q)["verify_passes"] < 40
