"""The step trace (inference.engine.step_trace): with ``step_trace=N`` the engine keeps a record of
each of its last N steps whose counts follow the requests (rows decoding, prompt tokens computed
less the cached ones, passes, first tokens, restores); off, it builds none. Counts only, never
wall-clock assertions."""

import asyncio
import json
import shutil
import threading

import pytest
from django.test import AsyncClient, override_settings

from inference.engine import LLM, EngineConfig, SamplingParams
from inference.engine.step_trace import StepClock, StepRecord, StepTrace
from inference.pool import close_pool
from tests.support.token_ids import random_ids

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


def _record(step, **fields):
    values = dict(
        start=0.0,
        seconds=1.0,
        schedule_seconds=0.0,
        decode_rows=0,
        decode_passes=0,
        prefill_rows=0,
        prompt_tokens=0,
        padded_tokens=0,
        prefill_passes=0,
        first_tokens=0,
        restores=0,
        restored_tokens=0,
        prefill_seconds=0.0,
        decode_seconds=0.0,
    )
    values.update(StepClock().seconds(), **fields)
    return StepRecord(step=step, **values)


def test_the_ring_keeps_the_last_n():
    trace = StepTrace(3)
    for step in range(1, 6):
        trace.append(_record(step))
    assert [r.step for r in trace.records()] == [3, 4, 5]
    assert [r.step for r in trace.records(2)] == [4, 5]
    assert [r.step for r in trace.records(10)] == [3, 4, 5]
    assert trace.records(0) == []
    with pytest.raises(ValueError):
        StepTrace(0)


def test_host_seconds_are_what_the_clocks_leave():
    record = _record(1, seconds=1.0, device_wait_seconds=0.5, launch_seconds=0.2, store_seconds=0.1)
    assert record.host_seconds == pytest.approx(0.2)
    assert record.as_dict()["host_seconds"] == pytest.approx(0.2)
    assert json.loads(json.dumps(record.as_dict()))["step"] == 1  # plain data


@pytest.mark.parametrize("value", [-1, True, 1.5, EngineConfig.MAX_STEP_TRACE + 1])
def test_bad_settings(value):
    with pytest.raises(ValueError, match="step_trace"):
        EngineConfig(step_trace=value)


def _run(llm, prompts, max_tokens):
    results = llm.generate(prompts, SamplingParams(max_tokens=max_tokens, **GREEDY))
    assert all(r.finish_reason == "length" for r in results)
    return results


def _check_shape(records, steps):
    """Records of consecutive steps ending at the engine's last; a decode pass has its rows."""
    assert [r.step for r in records] == list(range(steps - len(records) + 1, steps + 1))
    for r in records:
        assert r.decode_passes in (0, 1) and (r.decode_rows > 0) == (r.decode_passes == 1)
        assert r.padded_tokens >= r.prompt_tokens and (r.prefill_passes > 0) == (r.prompt_tokens > 0)
        assert r.seconds >= 0 and r.host_seconds >= 0


def test_one_stream_is_one_prefill_pass_then_one_row_a_step(path):
    with LLM(path, prefix_cache=False, step_trace=1000) as llm:
        _run(llm, random_ids(40, 1), 6)
        engine = llm.engine
        records = engine.step_trace()
        _check_shape(records, engine.steps)
        prefill = [r for r in records if r.prompt_tokens]
        assert len(prefill) == 1
        assert (prefill[0].prompt_tokens, prefill[0].padded_tokens, prefill[0].prefill_passes) == (40, 40, 1)
        assert prefill[0].prefill_rows == 1 and prefill[0].first_tokens == 1
        # the pass that finished the prompt was evaluated on its own clock, apart from its store
        assert prefill[0].prefill_compute_seconds > 0
        assert all(r.prefill_compute_seconds == 0 for r in records if not r.first_tokens)
        assert sum(r.first_tokens for r in records) == 1
        assert {r.decode_rows for r in records if r.decode_passes} == {1}
        assert not any(r.verify for r in records)  # no speculation: no verify pass
        # The first token comes from the prefill; the other 5 from decode passes (the GPU's
        # pipeline may run one more, whose token is never read).
        assert sum(r.decode_passes for r in records) in (5, 6)
        assert engine.step_trace(2) == records[-2:]


def test_a_verify_pass_is_marked_as_one(path):
    """``verify``: the steps whose decode pass verified drafts, as many as the counter has."""
    with LLM(path, prefix_cache=False, step_trace=1000) as llm:
        llm.engine.call(lambda e: setattr(e.runner.speculation, "costs", None))  # whatever it costs
        params = SamplingParams(max_tokens=30, speculative="lookup", num_draft_tokens=4, **GREEDY)
        llm.generate([[20, 21, 22, 23, 20, 21]], params)  # the tiny model loops on it
        passes = llm.engine.stats().speculative["verify_passes"]
        records = llm.engine.step_trace()
        assert passes > 0 and sum(r.verify for r in records) == passes
        assert all(r.decode_passes == 1 for r in records if r.verify)


def test_no_verify_pass_while_a_prompt_waits_for_its_next_chunk(path):
    """A step after which a prompt still has chunks to compute decodes plainly (its next chunk,
    and so its first token, would wait for a verify pass); the row speculates again after."""
    with LLM(
        path, prefix_cache=False, step_trace=1000, prefill_chunk_size=16, max_concurrent_requests=2
    ) as llm:
        llm.engine.call(lambda e: setattr(e.runner.speculation, "costs", None))  # whatever it costs
        params = SamplingParams(max_tokens=80, speculative="lookup", num_draft_tokens=4, **GREEDY)
        # 30 chunks of the long prompt: the short one's row loops (and drafts) before they end
        llm.generate([[20, 21, 22, 23, 20, 21], random_ids(480, 4)], params)
        records = llm.engine.step_trace()
        waiting = [r for r in records if r.prompt_tokens and not r.first_tokens and r.decode_passes]
        assert len(waiting) >= 25  # the long prompt's chunks, next to the decoding row
        assert not any(r.verify for r in waiting)
        assert any(r.verify for r in records)


def test_no_verify_pass_in_a_step_a_request_arrived_during(path):
    """A request submitted while a step runs is admitted by the next step: its first token waits
    for this one's decode, so that decode is plain (with no cost rule the waiting request always
    comes first). Each one-token request here submits the next from its first token's callback,
    on the engine thread, when its step's prefill is done and its decode is not: an arrival
    during the step, every time. The looping row verifies in the steps nobody waits for."""
    with LLM(path, prefix_cache=False, step_trace=1000) as llm:
        engine = llm.engine
        engine.call(lambda e: setattr(e.runner.speculation, "costs", None))  # whatever it costs
        arrived_in, done = [], threading.Event()  # the steps during which a request was submitted
        one = SamplingParams(max_tokens=1, **GREEDY)

        def submits_the_next(event):  # (each request's one event: its token, finished)
            if len(arrived_in) < 4:
                arrived_in.append(engine.steps)
                engine.submit(random_ids(8, len(arrived_in)), one, callback=submits_the_next)
            else:
                done.set()

        loop = SamplingParams(max_tokens=200, speculative="lookup", num_draft_tokens=4, **GREEDY)
        stream = engine.submit([20, 21, 22, 23, 20, 21], loop)  # the tiny model loops: it drafts
        started = False
        for event in stream:
            if not started and engine.stats().speculative["verify_passes"] >= 3:
                engine.submit(random_ids(8, 0), one, callback=submits_the_next)
                started = True
        assert done.wait(60) and len(arrived_in) == 4
        records = {r.step: r for r in engine.step_trace()}
        for step in arrived_in:  # a prompt's first token, then the looping row's pass: plain
            record = records[step]
            assert (record.first_tokens, record.decode_passes, record.decode_rows) == (1, 1, 1)
            assert not record.verify
        assert sum(r.verify for r in records.values() if r.step > arrived_in[-1]) >= 3


def test_two_prompts_share_the_step_and_then_decode_as_two_rows(path):
    with LLM(
        path, prefix_cache=False, step_trace=1000, max_concurrent_requests=2, max_batch_wait_ms=10_000
    ) as llm:  # both waiting fill the slots: admitted together
        _run(llm, [random_ids(30, 2), random_ids(50, 3)], 5)
        records = llm.engine.step_trace()
        _check_shape(records, llm.engine.steps)
        (prefill,) = [r for r in records if r.prompt_tokens]
        assert (prefill.prefill_rows, prefill.prompt_tokens, prefill.first_tokens) == (2, 80, 2)
        # one pass padded to the longer prompt, or one pass each
        assert (prefill.prefill_passes, prefill.padded_tokens) in ((1, 100), (2, 80))
        assert max(r.decode_rows for r in records) == 2


def test_a_cached_prefix_is_restored_not_computed(path):
    with LLM(path, step_trace=1000, cache_block_size=16) as llm:
        engine = llm.engine
        first = random_ids(40, 4)
        _run(llm, first, 3)
        before = engine.steps
        (result,) = _run(llm, first + random_ids(20, 5), 3)
        cached = result.usage.cached_tokens
        assert cached >= 32  # two whole blocks at least
        records = [r for r in engine.step_trace() if r.step > before]
        assert sum(r.prompt_tokens for r in records) == 60 - cached
        assert sum(r.restores for r in records) == 1
        assert sum(r.restored_tokens for r in records) == cached


def test_the_engine_keeps_only_the_last_n_steps(path):
    with LLM(path, prefix_cache=False, step_trace=3) as llm:
        _run(llm, random_ids(20, 6), 10)
        records = llm.engine.step_trace()
        assert len(records) == 3
        _check_shape(records, llm.engine.steps)


def test_off_builds_no_record(path, monkeypatch):
    def planted(**fields):
        raise AssertionError("a step record was built with the trace off")

    monkeypatch.setattr("inference.engine.engine.StepRecord", planted)
    with LLM(path, prefix_cache=False) as llm:
        _run(llm, random_ids(20, 7), 5)  # a record would fail the step, and the request with it
        assert llm.engine.step_trace() == [] and llm.engine.steps > 0


# -- GET /v1/engine/step_trace ------------------------------------------------------------------


@pytest.fixture
def api(tmp_path, model_dir):
    models = tmp_path / "models"
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    close_pool()
    with override_settings(
        OMLX_MODEL_DIR=models,
        OMLX_MODEL_DIRS=[models],
        OMLX_API_HANDOFF="direct",
        OMLX_API_KEY="sekrit",
        OMLX_STEP_TRACE=50,
    ):
        yield
    close_pool()


def _get(path, **headers):
    async def go():
        response = await AsyncClient().get(path, headers=headers)
        return response.status_code, json.loads(response.content)

    return asyncio.run(go())


def test_the_route_returns_the_loaded_models_steps(api):
    from inference.pool import get_pool

    auth = {"authorization": "Bearer sekrit"}
    assert _get("/v1/engine/step_trace")[0] == 401
    assert _get("/v1/engine/step_trace?model=tiny", **auth)[0] == 404  # not loaded
    with get_pool().lease("tiny") as engine:
        stream = engine.submit(random_ids(10, 8), SamplingParams(max_tokens=4, **GREEDY))
        list(stream)
    status, body = _get("/v1/engine/step_trace?model=tiny&last=2", **auth)
    assert status == 200, body
    (row,) = body["data"]
    assert row["id"] == "tiny" and row["step_trace"] == 50 and len(row["steps"]) == 2
    assert {"step", "decode_rows", "prompt_tokens", "device_wait_seconds", "host_seconds"} <= set(
        row["steps"][0]
    )
    assert _get("/v1/engine/step_trace?last=5000", **auth)[0] == 400
