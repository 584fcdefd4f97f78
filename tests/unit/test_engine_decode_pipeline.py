"""The decode pipeline on the CPU (DecodeBatch.report_first): a step's tokens are handed out
before the next pass is queued, and no pass runs after a row's last token (by length). Counts
of passes and the state at each reported token, never wall-clock assertions."""

import json
import threading

import mlx.core as mx
import pytest
from mlx_lm.models.cache import BatchKVCache

from inference.engine import LLM, SamplingParams, batch_join, batch_leave, cache_io
from tests.support.engine_control import hold

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(model_dir):
    # Prompts submitted together are computed in one step whatever the measured costs say
    # (a step-time target this large bounds nothing; by default the costs decide whether they
    # run apart: tests/unit/test_engine_prompts_apart.py): what is tested here is the decode.
    with LLM(model_dir(arch="qwen2", preset="tiny"), max_concurrent_requests=8, max_step_ms=60_000) as llm:
        yield llm


class CountingModel:
    """The engine's model, counting the rows of every decode pass (a decode pass feeds one
    token per row)."""

    def __init__(self, model):
        self.model = model
        self.rows = []

    def __call__(self, inputs, *args, **kwargs):
        self.rows.append(inputs.shape[0])
        return self.model(inputs, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def _counting(llm):
    batch = llm.engine.runner.batch
    counter = CountingModel(batch.model)
    llm.engine.call(lambda engine: setattr(batch, "model", counter))
    return counter, lambda: llm.engine.call(lambda engine: setattr(batch, "model", counter.model))


# Only the CPU reports before it queues (on Metal and CUDA the pass is queued first, as mlx-lm's).
on_the_cpu = pytest.mark.skipif(mx.default_device() != mx.cpu, reason="report_first is the CPU's order")


@on_the_cpu
@pytest.mark.parametrize("lengths", [[8], [4, 9, 1, 6]])
def test_no_pass_after_a_rows_last_token(llm, lengths):
    """A request of n tokens takes its first from the prefill and n - 1 from decode passes:
    the pass that would feed its n-th token (only for its KV) is not run."""
    counter, restore = _counting(llm)
    try:
        results = llm.generate(
            [[5 + i, 6, 7, 8] for i in range(len(lengths))],
            [SamplingParams(max_tokens=n, **GREEDY) for n in lengths],
        )
    finally:
        restore()
    assert [len(r.token_ids) for r in results] == lengths
    assert all(r.finish_reason == "length" for r in results)
    assert sum(counter.rows) == sum(n - 1 for n in lengths)


@on_the_cpu
def test_the_step_costs_see_every_decode_pass_and_no_report_only_step(llm):
    """What a decode step costs is learned from the steps that ran a decode pass, with all its
    rows (those whose prompts the same step finished too); the report-only step at the end of
    a request is not a decode step."""
    engine = llm.engine
    seen = []

    def spy(e):
        observe = e.scheduler.costs.observe

        def recording(decode_rows, prefill_tokens, *args):
            if decode_rows or prefill_tokens:  # not an empty step (a step that only reports is one)
                seen.append((decode_rows, prefill_tokens))
            return observe(decode_rows, prefill_tokens, *args)

        e.scheduler.costs.observe = recording
        return e.runner.batch.passes

    passes = engine.call(spy)
    try:
        llm.generate([[4, 4, 4]], SamplingParams(max_tokens=6, **GREEDY))
        passes = engine.call(lambda e: e.runner.batch.passes) - passes
    finally:
        engine.call(lambda e: e.scheduler.costs.__dict__.pop("observe"))
    assert passes == 5  # tokens 2 to 6
    assert seen == [(1, 3)] + [(1, 0)] * 4  # the prefill step also decodes the new row


@on_the_cpu
def test_tokens_are_out_before_the_next_pass_is_queued(llm):
    """Every decoded token but a request's last reaches its stream while the pass that follows
    it is built and not yet queued (on the CPU queueing it would run most of it first)."""
    batch = llm.engine.runner.batch
    seen, finished = [], []
    done = threading.Event()

    def on_event(event):
        if event.token_ids and not event.finished:
            seen.append(batch.unlaunched)
        if event.finished:
            finished.append(event)
            if len(finished) == 3:
                done.set()

    release = hold(llm.engine)  # the three are admitted, and decode, together
    for i in range(3):
        llm.engine.submit([9, 8, 7, i], SamplingParams(max_tokens=10, **GREEDY), callback=on_event)
    release.set()
    assert done.wait(60)
    # 3 first tokens (from the prefill: no pass pending then), 3 x 8 decoded before the last
    assert seen == [False] * 3 + [True] * 3 * 8
    assert not batch.unlaunched  # after the step nothing is left unqueued


ENUM = {
    "type": "json_schema",
    "schema": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
        "required": ["color", "ok"],
        "additionalProperties": False,
    },
}


@pytest.mark.parametrize("background", [False, True])
def test_structured_and_background_rows_decode_as_alone(llm, background):
    """Rows with a grammar (their masks are built from the previous tokens, which ``step``
    reads before the pass is queued; when another row ends by length they advance in a
    report-only step) next to plain rows, and with a background row (the batch then does not
    sample ahead): each row decodes what it decodes alone."""
    prompt = [3, 4, 5, 6]
    params = [
        SamplingParams(max_tokens=12, **GREEDY),
        SamplingParams(max_tokens=100, structured=ENUM, **GREEDY),
        SamplingParams(max_tokens=5, structured=ENUM, **GREEDY),
    ]
    if background:
        params.append(SamplingParams(max_tokens=12, priority=5, **GREEDY))
    alone = [llm.generate([prompt], p)[0] for p in params]
    mixed = llm.generate([prompt] * len(params), params)
    assert [r.token_ids for r in mixed] == [r.token_ids for r in alone]
    assert json.loads(mixed[1].text)["color"] in ("red", "green", "blue")
    assert mixed[1].finish_reason == "stop" and mixed[2].finish_reason == "length"
    assert len(mixed[1].token_ids) > 5 and len(mixed[2].token_ids) == 5


def together(llm, prompts, lengths, name: str) -> dict:
    """Submit ``prompts`` (greedy, ``lengths[i]`` tokens each) so that they are admitted in one
    step; request id -> its tokens once all have ended."""
    tokens = {f"{name}-{i}": [] for i in range(len(prompts))}
    ended = []
    done = threading.Event()

    def on_event(event):
        tokens[event.request_id] += event.token_ids
        if event.finished:
            ended.append(event.request_id)
            if len(ended) == len(prompts):
                done.set()

    release = hold(llm.engine)
    for (request_id, _), p, n in zip(tokens.items(), prompts, lengths):
        llm.engine.submit(p, SamplingParams(max_tokens=n, **GREEDY), request_id=request_id, callback=on_event)
    release.set()
    assert done.wait(60)
    return tokens


def test_rows_joining_in_one_step_are_merged_into_the_batch_once(llm, monkeypatch):
    """The rows that join the decode batch in one step are merged into its caches together:
    one merge of the newcomers per layer, and at most one extend of the batch per layer and
    step. (Extending the batch once per joining row copied all of its KV once per row: 16 edit
    streams joining at 3K tokens each cost the first pass after them more than 20 plain steps
    on the CPU, and a verify pass there was priced by it.) Outputs as each row alone."""
    merges, extends = [], []
    merge, extend = BatchKVCache.merge.__func__, BatchKVCache.extend

    def counting_merge(cls, caches):
        merges.append(len(caches))
        return merge(cls, caches)

    def counting_extend(self, other):
        extends.append(self)
        return extend(self, other)

    prompts = [[9, 8, 7, i] for i in range(6)]
    alone = [llm.generate([p], SamplingParams(max_tokens=6, **GREEDY))[0].token_ids for p in prompts[:3]]
    monkeypatch.setattr(BatchKVCache, "merge", classmethod(counting_merge))
    monkeypatch.setattr(BatchKVCache, "extend", counting_extend)
    tokens = together(llm, prompts, [6] * len(prompts), "join")  # admitted, and joining, in one step
    assert merges and all(n == len(prompts) for n in merges)  # (the prefill merges the six too)
    assert extends == []
    assert list(tokens.values())[:3] == alone


@pytest.mark.parametrize("give_back", [False, True], ids=["in-place", "memory-critical"])
def test_rows_leave_the_batch_in_place_and_decode_as_alone(llm, monkeypatch, give_back):
    """Rows that end at different steps leave the decode batch without a copy of the staying
    rows' KV (batch_leave: they keep their buffers, the rows past the new count moved into the
    leaving rows' slots); under memory pressure their memory is given back at once (a copy, as
    mlx-lm's filter makes it). Either way every row's tokens are what it decodes alone."""
    prompts = [[9, 8, 7, 20 + i] for i in range(5)]
    lengths = [3, 12, 5, 12, 8]
    alone = [
        llm.generate([p], SamplingParams(max_tokens=n, **GREEDY))[0].token_ids
        for p, n in zip(prompts, lengths)
    ]
    kinds = []
    leave = batch_leave.leave

    def watching(caches, order, in_place=True):
        leave(caches, order, in_place)
        kinds.append(
            {
                isinstance(c, batch_leave.Spare) and c.spare_buffers() is not None
                for c in cache_io.leaves(caches)
            }
        )

    monkeypatch.setattr(batch_leave, "leave", watching)
    if give_back:
        llm.engine.memory_critical.set()
    try:
        tokens = together(llm, prompts, lengths, "leave")
    finally:
        llm.engine.memory_critical.clear()
    assert list(tokens.values()) == alone
    if give_back:  # (one prompt a step under memory pressure: the rows join, and leave, apart)
        assert kinds and all(k == {False} for k in kinds)
    else:  # the rows of 3, 5 and 8 tokens left; the two of 12 ended together
        assert kinds == [{True}, {True}, {False}]  # 5 -> 4 -> 3 rows in place, then 2 of 5: copied


def test_a_row_joins_the_spare_row_a_leaving_row_left(llm, monkeypatch):
    """A row ends, and the next request's row joins the batch in the slot it left (batch_join:
    written into the batch's buffers, no copy of the other rows' KV), as an agent's next turn
    joins after its last answer ended; every row's tokens are what it decodes alone."""
    prompts = [[9, 8, 7, 30 + i] for i in range(4)]
    lengths = [3, 40, 40, 40]
    newcomer, newcomer_length = [9, 8, 7, 6, 50], 10
    alone = [
        llm.generate([p], SamplingParams(max_tokens=n, **GREEDY))[0].token_ids
        for p, n in zip(prompts + [newcomer], lengths + [newcomer_length])
    ]
    joins = []
    join = batch_join.join

    def watching(batch_cache, rows):
        joins.append(join(batch_cache, rows))
        return joins[-1]

    monkeypatch.setattr(batch_join, "join", watching)
    tokens = {f"spare-{i}": [] for i in range(5)}
    ended, first_ended, done = [], threading.Event(), threading.Event()

    def on_event(event):
        tokens[event.request_id] += event.token_ids
        if event.finished:
            ended.append(event.request_id)
            first_ended.set()
            if len(ended) == 5:
                done.set()

    release = hold(llm.engine)
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        llm.engine.submit(
            p, SamplingParams(max_tokens=n, **GREEDY), request_id=f"spare-{i}", callback=on_event
        )
    release.set()
    assert first_ended.wait(60) and ended == ["spare-0"]
    params = SamplingParams(max_tokens=newcomer_length, **GREEDY)
    llm.engine.submit(newcomer, params, request_id="spare-4", callback=on_event)
    assert done.wait(60)
    assert list(tokens.values()) == alone
    assert joins and all(joins)  # the newcomer's every layer joined in place
