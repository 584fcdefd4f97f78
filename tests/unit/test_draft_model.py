"""Speculative decoding with a draft model (inference.engine.speculative.draft_model,
inference.pool.drafts): a row's draft cache follows what the target kept, greedy output equals
plain decoding in a mixed batch (a smaller draft, and the target as its own draft: every draft
accepted), a draft of another tokenizer is refused with the reason, and the pool loads the
draft as a model, counts it and keeps it loaded while its target is."""

import shutil

import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.model_loader import load_model
from inference.engine.request import Request
from inference.engine.speculative import SpeculationPolicy
from inference.engine.speculative.draft_model import DraftModel
from inference.engine.step_costs import StepCosts
from inference.pool import ModelBusy, ModelPool
from tests.support.jobs import job_events

GREEDY = dict(temperature=0, ignore_eos=True)
PROMPTS = [[20, 21, 22, 23, 20, 21], [5, 6, 7, 8, 9, 10, 11, 5, 6, 7, 8, 9], [30, 31, 32, 33, 34, 30, 31]]


@pytest.fixture(scope="module")
def folders(model_dir):
    """target, a smaller draft of its tokenizer, a model of another vocabulary."""
    return (
        model_dir("llama", "tiny"),
        model_dir("llama", "tiny", num_hidden_layers=1),
        model_dir("llama", "tiny", vocab_size=512),
    )


@pytest.fixture(scope="module")
def llm(folders):
    with LLM(folders[0], max_concurrent_requests=8) as llm:
        # No cost rule: rows draft whatever a verify pass costs (these tests are about output).
        llm.engine.call(lambda engine: setattr(engine.runner.speculation, "costs", None))
        yield llm


def test_the_draft_cache_follows_what_the_target_kept(folders):
    """A drafter that saw drafts refuted and confirmed proposes what a fresh drafter fed the
    same tokens at once proposes: its cache was trimmed to the kept tokens, and confirmed
    drafts are not decoded again."""
    target, draft = (load_model(path) for path in folders[:2])
    model = DraftModel("d", draft, target)
    model.PREFILL_CHUNK = 4  # the prompt catches up in several chunks
    tokens = list(range(40, 51))
    used = model.drafter()
    used.extend(tokens)
    proposal = used.propose(4)
    assert len(proposal) == 4
    rejected = (proposal[0] + 1) % 500
    kept = [proposal[0], rejected]  # one draft kept, then the target's other token
    used.extend(kept[:1])  # confirmed: the pending drafts stay
    assert used.pending == proposal[1:] and used.propose(3) == proposal[1:]
    used.extend(kept[1:])  # refuted: the cache goes back to the kept tokens
    assert used.pending == [] and used.cached == len(tokens) + 1
    again = used.propose(5)
    fresh = model.drafter()
    fresh.extend(tokens + kept)
    assert again == fresh.propose(5)
    used.extend(again[:2] + [7, 8, 9])  # two kept, then tokens the draft never proposed
    fresh = model.drafter()
    fresh.extend(tokens + kept + again[:2] + [7, 8, 9])
    assert used.propose(6) == fresh.propose(6)


def test_a_draft_model_that_does_not_pay_is_checked_less_and_less(folders):
    """A row whose draft model does not pay decodes plainly (shadow) and checks a one-token
    proposal now and then, the gap doubling: not a draft-model pass every step."""
    model = DraftModel("d", load_model(folders[1]), load_model(folders[0]))
    costs = StepCosts()
    costs.decode_seconds = 1.0
    policy = SpeculationPolicy("draft", 4, costs)
    policy.draft, policy.verify_seconds = model, 100.0  # a verify step never pays
    policy.probe_after = SpeculationPolicy.PROBE_STEPS  # (and its price is not stale in 100 steps)
    params = SamplingParams(max_tokens=200, speculative="draft", **GREEDY)
    request = Request("r", list(range(40, 51)), params, None, frozenset(), None, 0)
    drafter = policy.row_state(request).drafter
    asked, propose = [], drafter.propose
    drafter.propose = lambda k: asked.append(k) or propose(k)  # (counts the real calls)
    for i in range(100):
        assert not policy.wanted([request], None)
        request.output_token_ids.append(7 * i % 500 + 3)
    assert 3 <= len(asked) <= 8 and set(asked) == {1}


def test_greedy_with_a_draft_model_equals_plain_in_a_mixed_batch(llm, folders):
    """Speculating rows next to a greedy row that does not speculate and a seeded sampling row:
    each decodes what plain decoding gives, with a smaller draft (drafts rejected: rollbacks)
    and with the target as its own draft (every draft accepted)."""
    prompts = PROMPTS + [[40, 41, 40, 41], [50, 51, 52]]
    plain = [SamplingParams(max_tokens=n, **GREEDY) for n in (40, 33, 27, 30)]
    plain.append(SamplingParams(max_tokens=30, temperature=0.8, seed=3))
    want = [r.token_ids for r in llm.generate(prompts, plain)]
    mixed = [
        SamplingParams(max_tokens=p.max_tokens, speculative="draft", num_draft_tokens=4, **GREEDY)
        for p in plain[:3]
    ]
    mixed += [SamplingParams(max_tokens=30, speculative="off", **GREEDY), plain[4]]
    for path in folders[1], folders[0]:
        llm.engine.attach_draft("draft", load_model(path))
        before = llm.engine.stats().speculative
        got = [r.token_ids for r in llm.generate(prompts, mixed)]
        assert got == want
        after = llm.engine.stats().speculative
        drafted = after["drafted_tokens"] - before["drafted_tokens"]
        accepted = after["accepted_tokens"] - before["accepted_tokens"]
        assert drafted > 0
    assert accepted == drafted  # the target drafting for itself: every draft kept
    assert after["verify_passes"] - before["verify_passes"] < 40


def test_a_draft_of_another_vocabulary_is_refused(llm, folders):
    with pytest.raises(ValueError, match="another tokenizer"):
        llm.engine.attach_draft("other", load_model(folders[2]))
    with pytest.raises(
        ValueError, match="speculative=draft: this model has no draft model.*another tokenizer"
    ):
        llm.generate([PROMPTS[0]], SamplingParams(max_tokens=4, speculative="draft"))
    assert (
        len(llm.generate([PROMPTS[0]], SamplingParams(max_tokens=4, speculative="lookup"))[0].token_ids) == 4
    )


@pytest.mark.django_db(transaction=True)
def test_the_pool_loads_counts_and_keeps_the_draft_model(tmp_path, folders, monkeypatch):
    """A model whose draft_model setting names another loads it through the pool: both count in
    its memory, the draft is not unloaded (LRU or by hand) while its target is loaded, and is
    free to go once the target is unloaded. A draft of another tokenizer: a 400 with the reason."""
    from inference import pool as pool_module

    models = tmp_path / "models"
    for name, path in zip(("target", "draft", "other", "third"), (*folders, folders[0])):
        shutil.copytree(path, models / name)
    settings = {"max_concurrent_requests": 2, "hot_cache_max_size": "1MB", "cache_block_size": 16}
    probe = ModelPool([models], settings)
    size = {i: probe.estimate(i).total_bytes for i in ("target", "draft", "third")}
    limit = sum(size.values()) - 1  # the three do not fit together
    pool = ModelPool([models], settings, max_model_memory=limit)
    monkeypatch.setattr(pool_module, "_pool", pool)
    try:
        pool.update_settings("target", {"draft_model": "draft", "speculative": "draft"})
        with pytest.raises(ValueError, match="draft_model"):
            pool.update_settings("target", {"draft_model": "nowhere"})
        pool.engine("target")
        assert pool.loaded("draft") is not None and pool.used_bytes() == size["target"] + size["draft"]
        events = job_events("target", PROMPTS[1], max_tokens=12, **GREEDY)
        assert events[-1]["usage"]["completion_tokens"] == 12
        assert pool.loaded("target").stats().speculative["drafted_tokens"] > 0
        with pytest.raises(ModelBusy, match="drafts for 'target'"):
            pool.unload("draft")
        pool.engine("target")  # the draft is now the least recently used
        pool.engine("third")  # room for it: the target goes, not the draft it held
        assert pool.loaded("target") is None and pool.loaded("draft") is not None
        assert pool.unload("draft")  # released with its target
        pool.update_settings("third", {"draft_model": "other"})  # taken at its next load
        assert pool.unload("third")
        events = job_events("third", PROMPTS[0], max_tokens=4, speculative="draft")
        assert events[-1]["kind"] == "error" and events[-1]["status"] == 400
        assert "another tokenizer" in events[-1]["message"]
    finally:
        pool.close()
