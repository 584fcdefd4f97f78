"""Scheduling on the real engine: priorities, aging (nothing starves), preemption of the least
urgent request, batch wait with a stepping clock, and the first token sent when the prompt is
done. Counts of steps and the order of events, never wall-clock times."""

import threading

import pytest

from inference.engine import LLM, SamplingParams
from tests.support.engine_control import hold
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


class Recorder:
    """Submits requests to an engine and records (request id, event kind) in arrival order."""

    def __init__(self, engine):
        self.engine = engine
        self.events = []
        self.done = {}
        self.tokens = {}
        self._lock = threading.Lock()

    def submit(self, name, prompt, **params):
        finished = threading.Event()
        self.done[name] = finished

        def on_event(event):
            with self._lock:
                self.tokens.setdefault(name, []).extend(event.token_ids)
                if event.token_ids and not any(n == name and k == "first" for n, k in self.events):
                    self.events.append((name, "first"))
                if event.finished:
                    self.events.append((name, "end"))
                    finished.set()

        self.engine.submit(prompt, SamplingParams(**{**GREEDY, **params}), request_id=name, callback=on_event)

    def wait(self, timeout=120):
        for name, finished in list(self.done.items()):  # requests submitted meanwhile are waited for
            assert finished.wait(timeout), f"{name} did not finish"

    def order(self, kind):
        return [n for n, k in self.events if k == kind]


def test_more_urgent_requests_are_admitted_first(path):
    with LLM(path, max_concurrent_requests=1) as llm:
        rec = Recorder(llm.engine)
        release = hold(llm.engine)
        for i, priority in enumerate([5, 0, 9, -2, 0]):
            rec.submit(f"r{i}", random_ids(12, i), max_tokens=3, priority=priority)
        release.set()
        rec.wait()
    # Lower first; arrival order among equals.
    assert rec.order("first") == ["r3", "r1", "r4", "r0", "r2"]


def test_aging_lets_a_background_request_through(path):
    """A background request while interactive ones keep arriving (a new one each time one
    ends): with aging it is admitted after a bounded number of steps, between them; the
    control without aging shows what the test would see on starvation (it runs last)."""
    orders = {}
    for aging in (2, 10**9):
        with LLM(path, max_concurrent_requests=1) as llm:
            llm.engine.call(lambda e: setattr(e.scheduler, "PRIORITY_AGING_STEPS", aging))
            finished = threading.Event()
            order, count = [], [0]

            def submit_chat():
                i = count[0]
                count[0] += 1
                llm.engine.submit(
                    random_ids(10, i),
                    SamplingParams(max_tokens=2, priority=0, **GREEDY),
                    request_id=f"chat{i}",
                    callback=on_event(f"chat{i}"),
                )

            def on_event(name):
                def handle(event):
                    if event.finished:
                        order.append(name)
                        if name.startswith("chat") and count[0] < 16:
                            submit_chat()
                        if len(order) == 17:
                            finished.set()

                return handle

            release = hold(llm.engine)
            llm.engine.submit(
                random_ids(10, 99),
                SamplingParams(max_tokens=2, priority=10, **GREEDY),
                request_id="background",
                callback=on_event("background"),
            )
            submit_chat()
            release.set()
            assert finished.wait(120)
            orders[aging] = order
    assert orders[10**9][-1] == "background"  # no aging: after every interactive request
    position = orders[2].index("background")
    assert position < 16  # aged: admitted while interactive requests still arrive


def test_preemption_takes_the_least_urgent_request(path):
    prompts = [random_ids(40, 1), random_ids(40, 2), random_ids(40, 3)]
    with LLM(path, prefix_cache=False) as off:
        expected = [r.token_ids for r in off.generate(prompts, SamplingParams(max_tokens=20, **GREEDY))]
    with LLM(path, max_kv_tokens=140, max_concurrent_requests=3, prefix_cache=False) as llm:
        rec = Recorder(llm.engine)
        release = hold(llm.engine)
        for name, prompt, priority in zip(("urgent", "background", "normal"), prompts, (0, 7, 3)):
            rec.submit(name, prompt, max_tokens=20, priority=priority)
        release.set()
        rec.wait()
        preempted = llm.engine.scheduler.num_preemptions
        results = llm.generate(prompts, SamplingParams(max_tokens=20, **GREEDY))
        outputs = [r.token_ids for r in results]
    assert preempted > 0
    assert rec.order("end")[-1] == "background"  # preempted first, finished last
    assert outputs == expected


def test_batch_wait_holds_new_requests_until_due_or_a_batch_is_full(path):
    with LLM(path, max_concurrent_requests=3, max_batch_wait_ms=500) as llm:
        now = [1000.0]
        llm.engine.call(lambda e: setattr(e.scheduler, "clock", lambda: now[0]))
        rec = Recorder(llm.engine)
        rec.submit("a", random_ids(10, 1), max_tokens=2)
        # However long real time runs, the stepping clock has not moved: "a" is held.
        assert not rec.done["a"].wait(1.0)
        assert llm.engine.call(lambda e: [r.request_id for r in e.scheduler.waiting]) == ["a"]
        now[0] += 0.5  # its wait is over
        rec.wait()
        assert rec.order("end") == ["a"]

        # Three waiting requests fill the three free slots: admitted at once, together.
        release = hold(llm.engine)
        for name in ("b", "c", "d"):
            rec.submit(name, random_ids(10, ord(name)), max_tokens=2)
        release.set()
        rec.wait()
        assert set(rec.order("end")) == {"a", "b", "c", "d"}


def test_first_token_is_sent_when_its_prompt_is_done(path):
    """Two prompts admitted in one step share one prefill forward pass; the short one is done
    after it and its first token is published at once, before the long one's second chunk and
    before any decode step runs (events reach the callback on the engine thread, in order)."""
    timeline = []
    with LLM(path, max_concurrent_requests=2, prefix_cache=False, prefill_chunk_size=16) as llm:

        def spy(e):
            prefill, decode = e.runner.prefill, e.runner.decode_step

            def recording(chunks, *args, **kwargs):
                timeline.append(("prefill", tuple((r.request_id, n) for r, n in chunks)))
                return prefill(chunks, *args, **kwargs)

            def decoding(*args):
                if e.runner.batch.rows:
                    timeline.append(("decode",))
                return decode(*args)

            e.runner.prefill, e.runner.decode_step = recording, decoding

        llm.engine.call(spy)
        done = {name: threading.Event() for name in ("one", "two")}

        def callback(name):
            def on_event(event):
                if event.token_ids and ("first", name) not in timeline:
                    timeline.append(("first", name))
                if event.finished:
                    done[name].set()

            return on_event

        release = hold(llm.engine)
        for name, size in (("one", 10), ("two", 30)):
            llm.engine.submit(
                random_ids(size, size),
                SamplingParams(max_tokens=3, **GREEDY),
                request_id=name,
                callback=callback(name),
            )
        release.set()
        assert all(d.wait(60) for d in done.values())
    assert timeline[:4] == [
        ("prefill", (("one", 10), ("two", 16))),
        ("first", "one"),
        ("decode",),
        ("prefill", (("two", 14),)),
    ]
    assert timeline[4] == ("first", "two")


def _spy_passes(engine, passes, on_pass):
    """Record the input shape of every forward pass of the model; ``on_pass(shape)`` after each."""
    model = engine.runner.model
    original = type(model).__call__

    class Spying(type(model)):
        def __call__(self, inputs, *args, **kwargs):
            passes.append(tuple(inputs.shape))
            on_pass(tuple(inputs.shape))
            return original(self, inputs, *args, **kwargs)

    model.__class__ = Spying


def test_background_prefill_gives_way_to_an_urgent_arrival(path):
    """An interactive request submitted while a background prompt's chunk is being computed
    does not wait for the rest of that chunk: the background prefill stops at its next piece
    (StepCosts.DEFAULT_PIECE tokens before any speed is measured), the next step prefills the
    interactive prompt, and the background prompt goes on afterwards, still giving the tokens
    it gives alone. The interactive request is submitted from inside the first forward pass, so
    the order of passes, not timing, decides."""
    background, interactive = random_ids(600, 1), random_ids(20, 2)
    settings = dict(prefix_cache=False, prefill_chunk_size=512, step_token_budget=2048)
    with LLM(path, **settings) as llm:
        alone = llm.generate([background], SamplingParams(max_tokens=4, **GREEDY))[0].token_ids
    passes = []
    with LLM(path, **settings) as llm:
        rec = Recorder(llm.engine)

        def on_pass(shape):
            if len(passes) == 1:
                rec.submit("interactive", interactive, max_tokens=2)

        llm.engine.call(lambda e: _spy_passes(e, passes, on_pass))
        rec.submit("background", background, max_tokens=4, priority=10)
        rec.wait()  # the background request ends last, so the interactive one was submitted
        rec.wait()
        assert rec.order("first") == ["interactive", "background"]
    assert passes[0] == (1, 128)  # the first piece only
    assert passes[1] == (1, 20)  # then the interactive prompt, whole
    assert sum(n for _, n in passes if n > 1) == 600 + 20  # every prompt token once
    assert rec.tokens["background"] == alone


def test_after_giving_way_the_step_does_not_decode(path):
    """The same next to a background stream that decodes: the step that gave way ends without
    its decode pass, so the next pass is the interactive prompt; both background requests give
    the tokens they give alone."""
    background, interactive, stream = random_ids(600, 1), random_ids(20, 2), random_ids(8, 3)
    settings = dict(prefix_cache=False, prefill_chunk_size=512, step_token_budget=2048)
    with LLM(path, **settings) as llm:
        alone = [
            r.token_ids for r in llm.generate([background, stream], SamplingParams(max_tokens=40, **GREEDY))
        ]
    passes = []
    with LLM(path, **settings) as llm:
        rec = Recorder(llm.engine)
        rec.submit("stream", stream, max_tokens=40, priority=10)
        while len(rec.tokens.get("stream", [])) < 3:  # the stream decodes
            threading.Event().wait(0.01)

        def on_pass(shape):
            if shape[1] > 1 and "interactive" not in rec.done:  # the background prompt's first pass
                rec.submit("interactive", interactive, max_tokens=2)

        llm.engine.call(lambda e: _spy_passes(e, passes, on_pass))
        rec.submit("background", background, max_tokens=40, priority=10)
        rec.wait()  # the background requests end last, so the interactive one was submitted
        rec.wait()
        assert rec.order("first") == ["stream", "interactive", "background"]
    first = next(i for i, (_, n) in enumerate(passes) if n > 1)
    assert passes[first][1] < 512 and passes[first + 1] == (1, 20)  # a piece, then no decode pass
    assert [rec.tokens["background"], rec.tokens["stream"]] == alone


def test_background_rows_decode_the_same_without_sampling_ahead(path):
    """While background rows decode, the batch does not sample ahead (each step's tokens are
    waited for): greedy and structured output are the same as at the default priority."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    prompts = [random_ids(12, 4), random_ids(30, 5)]
    got = {}
    for priority in (0, 10):
        with LLM(path, prefix_cache=False) as llm:
            plain = llm.generate(prompts, SamplingParams(max_tokens=12, priority=priority, **GREEDY))
            structured = llm.generate(
                prompts,
                SamplingParams(
                    max_tokens=24,
                    priority=priority,
                    temperature=0,
                    structured={"type": "json_schema", "schema": schema},
                ),
            )
            got[priority] = [r.token_ids for r in plain + structured]
    assert got[10] == got[0]
