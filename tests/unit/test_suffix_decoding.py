"""Suffix decoding (inference.engine.speculative.suffix): the suffix tree of earlier answers
(longest match, most frequent continuation, exact removal), the answer store's bounds and salts,
and on a tiny model: greedy output with "suffix" equals plain decoding token for token, and a
request whose answer repeats an earlier one of its salt drafts it."""

import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.request import Request
from inference.engine.speculative import SpeculationPolicy
from inference.engine.speculative.answers import AnswerStore
from inference.engine.step_costs import StepCosts
from inference.engine.speculative.suffix import SuffixDrafter
from inference.engine.speculative.suffix_tree import SuffixTree

GREEDY = dict(temperature=0, ignore_eos=True)
SUFFIX = dict(speculative="suffix", num_draft_tokens=4)


def test_the_longest_match_drafts_its_most_frequent_continuation():
    tree = SuffixTree(depth=6, max_match=4, min_match=2, min_probability=0.0)
    tree.add([1, 2, 3, 4, 5, 6])
    tree.add([9, 2, 3, 7, 8])
    tree.add([9, 2, 3, 7, 0])
    assert tree.propose([5, 2, 3], 2) == (2, [7, 8])  # [2, 3]: then 7 twice, 4 once
    assert tree.propose([1, 2, 3], 2) == (3, [4, 5])  # the longer match [1, 2, 3] decides
    assert tree.propose([8, 3], 3) == (0, [])  # [8, 3] never occurred; [3] alone is too short
    assert tree.propose([4, 5, 6], 3) == (0, [])  # it ends an answer: nothing follows it
    # Past the depth, the walk matches again on what it drafted: 6 tokens from a 6-deep tree.
    tree.add([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    assert tree.propose([10, 11], 6) == (2, [12, 13, 14, 15, 16, 17])
    # The most frequent child follows the counts as answers come.
    tree.add([5, 50, 51, 30])
    tree.add([6, 50, 51, 40])
    assert tree.propose([0, 50, 51], 1)[1] in ([30], [40])  # a tie
    for _ in range(2):
        tree.add([7, 50, 51, 40])
        assert tree.propose([0, 50, 51], 1) == (2, [40])
        tree.add([8, 50, 51, 30])
        tree.add([8, 50, 51, 30])
        assert tree.propose([0, 50, 51], 1) == (2, [30])
        tree.add([7, 50, 51, 40])


def test_an_unlikely_path_stops_the_draft():
    tree = SuffixTree(depth=6, max_match=3, min_match=2, min_probability=0.5)
    for last in (5, 6, 7):  # after [1, 2, 3, 4] come 5, 6 or 7: a third each
        tree.add([1, 2, 3, 4, last])
    assert tree.propose([1, 2], 4) == (2, [3, 4])


def test_removing_an_answer_leaves_the_tree_as_without_it():
    tree = SuffixTree(depth=4, max_match=3)
    tree.add([1, 2, 3, 1, 2])
    nodes = tree.nodes
    tree.add([1, 2, 4, 4, 4, 1, 2, 4])
    assert tree.propose([7, 1, 2], 1) == (2, [4])  # 4 follows [1, 2] three times, 3 once
    tree.remove([1, 2, 4, 4, 4, 1, 2, 4])
    assert tree.nodes == nodes and tree.propose([7, 1, 2], 2) == (2, [3, 1])
    tree.remove([1, 2, 3, 1, 2])
    assert tree.nodes == 0 and tree.root.children is None


def test_the_store_keeps_its_bounds_evicting_the_oldest_answers():
    """Windows are added and removed a few per fold (a step's work is bounded): over either
    bound, the oldest answer goes first; the bounds hold within one fold's work."""
    store = AnswerStore(max_tokens=60, max_nodes=150, depth=6, max_match=3)
    for i in range(20):
        store.add([100 * i + j for j in range(20)])  # 20 distinct tokens: 20 * 6 - 15 nodes
        for _ in range(4):
            before = store.nodes
            store.fold(budget=7)
            assert abs(store.nodes - before) <= 7 * 6  # at most 7 windows' work
            assert store.tokens <= 60 + 20 and store.nodes <= 150 + 7 * 6
    for _ in range(20):
        store.fold(budget=7)
    assert store.tokens <= 60 and store.nodes == store.tree(None).nodes <= 150
    assert store.tree(None).propose([1900, 1901], 2) == (2, [1902, 1903])  # the newest is kept
    assert store.tree(None).propose([1700, 1701], 2) == (0, [])  # an older one is gone
    store.add(list(range(130)))  # too long for the store: refused
    store.add([1, 2, 3] * 20)  # the bound alone: the older ones go
    for _ in range(30):
        store.fold(budget=7)
    assert store.tokens == 60 and store.salts() == {None} and store.tree(None).propose([1, 2], 1) == (2, [3])
    alone = SuffixTree(depth=6, max_match=3)
    alone.add([1, 2, 3] * 20)
    assert store.tree(None).nodes == alone.nodes  # exactly the tree of that answer alone


def test_answers_of_one_salt_never_reach_another_salts_drafts():
    store = AnswerStore()
    store.add([5, 6, 7, 8, 9], salt="key:1")
    store.add([5, 6, 1, 1, 1])
    store.fold()
    drafters = {salt: SuffixDrafter(store, salt) for salt in ("key:1", None, "key:2")}
    for drafter in drafters.values():
        drafter.extend([40, 5, 6])
    assert drafters["key:1"].propose(3) == [7, 8, 9]
    assert drafters[None].propose(3) == [1, 1, 1]
    assert drafters["key:2"].propose(3) == []


def test_the_request_own_tokens_win_a_tie():
    store = AnswerStore()
    store.add([7, 8, 1, 2])
    store.fold()
    drafter = SuffixDrafter(store)
    drafter.extend([7, 8, 3, 7, 8])  # [7, 8] in its own tokens (then 3) and in an answer (then 1)
    assert drafter.propose(1) == [3]
    drafter.extend([1])  # [7, 8, 1]: the answer's match is the longer
    assert drafter.propose(2) == [2]


def test_the_answers_kept_are_those_of_suffix_requests_or_a_suffix_model():
    def ended(salt, **params):
        request = Request("r", [1, 2], SamplingParams(**params), None, frozenset(), None, 0, cache_salt=salt)
        request.output_token_ids = [7, 8, 9]
        return request

    policy = SpeculationPolicy("lookup", 4)
    policy.finished(ended("a"))
    policy.finished(ended("b", speculative="off"))
    policy.finished(ended("c", speculative="suffix"))
    assert policy.answers.salts() == {"c"}
    policy.configure("suffix", 4)  # the model's setting: every answer, whatever the request asked
    policy.finished(ended("b", speculative="off"))
    assert policy.answers.salts() == {"b", "c"}


def test_a_stale_verify_cost_is_measured_again():
    """One verify pass that was slow (a loaded machine) keeps rows shadow, but not for good:
    ``probe_after`` steps later a row with a proposal drafts, and that pass measures again."""
    costs = StepCosts()
    costs.decode_seconds = 1.0
    policy = SpeculationPolicy("suffix", 4, costs)
    row = Request(
        "r", [1, 2, 3, 4] * 3, SamplingParams(max_tokens=1000, **GREEDY), None, frozenset(), None, 0
    )
    assert policy.wanted([row], None)  # its first proposal: it drafts
    policy.observe([row], [[1, 2, 3, 4]], [0], 60.0)  # nothing kept, and a pass of 60 steps' cost
    assert policy.probe_after == SpeculationPolicy.PROBE_MIN
    for step in range(SpeculationPolicy.PROBE_MIN - 1):
        row.output_token_ids.append([1, 2, 3, 4][step % 4])  # its proposals come true
        assert not policy.wanted([row], None)
    row.output_token_ids.append(1)
    assert policy.wanted([row], None) and policy.drafts([row], None)[0][:2] == [2, 3]
    policy.observe([row], [[2, 3, 4, 1]], [4], 1.5)
    assert policy.verify_seconds < 60 and policy.since_verify == 0


@pytest.fixture(scope="module")
def llm(model_dir):
    with LLM(model_dir(arch="llama", preset="tiny"), max_concurrent_requests=8) as llm:
        llm.engine.call(lambda engine: setattr(engine.runner.speculation, "costs", None))
        yield llm


def spec(llm, prompts, params, salt=None):
    before = llm.engine.stats().speculative
    out = llm.generate(prompts, params, cache_salt=salt)
    after = llm.engine.stats().speculative
    return [r.token_ids for r in out], {k: after[k] - before.get(k, 0) for k in after}


def test_a_repeated_answer_is_drafted_for_its_salt_only(llm):
    """A prompt without repetition: the tiny model's answer loops a little (prompt lookup keeps
    some drafts); asked again with "suffix", the first answer of the same salt is drafted and
    kept whole; another salt drafts as prompt lookup does. Every output is plain decoding's."""
    prompt = list(range(100, 140))
    plain, _ = spec(llm, [prompt], SamplingParams(max_tokens=48, **GREEDY))
    lookup, looked = spec(llm, [prompt], SamplingParams(max_tokens=48, speculative="lookup", **GREEDY))
    first, _ = spec(llm, [prompt], SamplingParams(max_tokens=48, **GREEDY, **SUFFIX), "agent")
    again, repeated = spec(llm, [prompt], SamplingParams(max_tokens=48, **GREEDY, **SUFFIX), "agent")
    other, elsewhere = spec(llm, [prompt], SamplingParams(max_tokens=48, **GREEDY, **SUFFIX), "other")
    assert lookup == first == again == other == plain
    assert repeated["accepted_tokens"] >= 30 and repeated["accepted_tokens"] == repeated["drafted_tokens"]
    assert looked["accepted_tokens"] < 20 and elsewhere["accepted_tokens"] == looked["accepted_tokens"]
    salts = llm.engine.call(lambda engine: engine.runner.speculation.answers.salts())
    assert {"agent", "other"} <= salts and None not in salts  # lookup's answers are not kept


def test_greedy_suffix_equals_plain_in_a_mixed_batch(llm):
    """Rows drafting from answers and from their own tokens, of different lengths, next to rows
    that do not speculate: every row decodes what plain decoding gives, turn after turn (each
    turn's answers feed the next turn's drafts)."""
    prompts = [[20, 21, 22, 23, 20, 21], [5, 6, 7, 8, 9, 10, 11, 5, 6], [60, 61, 62, 63], [50, 51, 52]]
    plain = [SamplingParams(max_tokens=n, **GREEDY) for n in (40, 33, 27, 30)]
    want, _ = spec(llm, prompts, plain)
    mixed = [SamplingParams(max_tokens=p.max_tokens, **GREEDY, **SUFFIX) for p in plain[:3]]
    mixed.append(SamplingParams(max_tokens=30, speculative="off", **GREEDY))
    for turn in range(2):
        got, counts = spec(llm, prompts, mixed, "mixed")
        assert got == want, turn
    assert counts["accepted_tokens"] > 0 and counts["verify_passes"] < 40
