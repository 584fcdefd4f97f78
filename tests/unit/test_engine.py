"""Behaviour of the engine on a tiny random model: sampling, stop conditions, streaming,
aborts, bad input."""

import json
import threading

import pytest

import torch
from transformers import AutoModelForCausalLM

from inference.engine import LLM, ModelLoadError, SamplingParams
from tests.support.hf_reference import hf_next

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


@pytest.fixture(scope="module")
def llm(path):
    with LLM(path, max_concurrent_requests=8) as llm:
        yield llm


def _greedy(llm, prompt, n=24):
    return llm.generate([prompt], SamplingParams(max_tokens=n, **GREEDY))[0]


def test_result_shape_and_usage(llm):
    result = llm.generate(["Hello there", [5, 6, 7]], SamplingParams(max_tokens=5, **GREEDY))
    assert len(result) == 2
    for r, n_prompt in zip(result, [len(llm.engine.encode("Hello there")), 3]):
        assert len(r.token_ids) == 5 and r.finish_reason == "length"
        assert r.usage.prompt_tokens == n_prompt and r.usage.completion_tokens == 5
        assert r.text == llm.tokenizer.decode(r.token_ids)


def test_seeded_sampling_is_the_same_in_any_batch(llm):
    seeded = SamplingParams(temperature=1.5, top_p=0.95, seed=7, max_tokens=20, ignore_eos=True)
    alone = llm.generate(["Once upon a time"], seeded)[0].token_ids
    others = [
        ("Completely different prompt text", SamplingParams(temperature=1.0, seed=1, max_tokens=30)),
        ([1, 2, 3], SamplingParams(temperature=0, max_tokens=8)),
        ("Once upon a time", SamplingParams(temperature=1.5, seed=8, max_tokens=20, ignore_eos=True)),
    ]
    prompts = [p for p, _ in others[:2]] + ["Once upon a time"] + [others[2][0]]
    params = [p for _, p in others[:2]] + [seeded] + [others[2][1]]
    batched = llm.generate(prompts, params)
    assert batched[2].token_ids == alone
    seeds = [
        llm.generate(
            ["Once upon a time"], SamplingParams(temperature=1.5, seed=s, max_tokens=20, ignore_eos=True)
        )[0].token_ids
        for s in (1, 2, 3)
    ]
    assert any(s != alone for s in seeds), "different seeds should sample differently"


def test_seeded_sampling_survives_preemption(path, llm):
    params = [
        SamplingParams(temperature=1.2, top_k=40, seed=s, max_tokens=24, ignore_eos=True) for s in range(4)
    ]
    prompts = ["alpha beta", "gamma delta epsilon", "zeta", "eta theta iota kappa"]
    expected = [r.token_ids for r in llm.generate(prompts, params)]
    with LLM(path, max_kv_tokens=70, max_concurrent_requests=4) as tight:
        got = [r.token_ids for r in tight.generate(prompts, params)]
        assert tight.engine.scheduler.num_preemptions > 0
    assert got == expected


def test_stop_string_ends_text_in_stream_and_result(llm):
    full = _greedy(llm, "The weather today", 40).text
    stop = full[12:15]
    assert stop and stop in full
    cut = full[: full.index(stop)]
    stream = llm.engine.submit("The weather today", SamplingParams(max_tokens=40, stop=[stop], **GREEDY))
    events = list(stream)
    streamed = "".join(e.text for e in events)
    assert streamed == cut
    assert events[-1].finish_reason == "stop"
    result = llm.generate(["The weather today"], SamplingParams(max_tokens=40, stop=stop, **GREEDY))[0]
    assert result.text == cut and result.finish_reason == "stop"
    kept = llm.generate(
        ["The weather today"],
        SamplingParams(max_tokens=40, stop=[stop], include_stop_str_in_output=True, **GREEDY),
    )[0]
    assert kept.text == cut + stop


def test_partial_stop_string_never_leaks(llm):
    full = _greedy(llm, "The weather today", 40).text
    # A stop string whose first characters appear in the output but which never matches.
    stop = full[20:23] + "\x07never"
    seen = ""
    for event in llm.engine.submit("The weather today", SamplingParams(max_tokens=40, stop=[stop], **GREEDY)):
        seen += event.text
        if not event.finished:
            assert not any(seen.endswith(stop[:k]) for k in range(1, len(stop))), seen
    assert seen == full  # held-back text is released at the end


def test_stop_token_ids_and_eos(llm):
    greedy = _greedy(llm, "Hello", 10)
    stop_token = greedy.token_ids[3]
    first = greedy.token_ids.index(stop_token)
    r = llm.generate(["Hello"], SamplingParams(max_tokens=10, stop_token_ids=[stop_token], **GREEDY))[0]
    assert r.token_ids == greedy.token_ids[: first + 1]
    assert r.finish_reason == "stop"
    assert r.text == llm.tokenizer.decode(greedy.token_ids[:first])


def test_streaming_events_add_up(llm):
    events = list(llm.engine.submit("Streaming test", SamplingParams(max_tokens=12, **GREEDY)))
    assert all(len(e.token_ids) == 1 for e in events)
    assert [e.finished for e in events] == [False] * 11 + [True]
    assert events[-1].usage.completion_tokens == 12
    assert "".join(e.text for e in events) == _greedy(llm, "Streaming test", 12).text


def test_logprobs(llm):
    r = llm.generate(["Logprobs"], SamplingParams(max_tokens=6, logprobs=3, **GREEDY))[0]
    assert len(r.logprobs) == 6
    for token, lp in zip(r.token_ids, r.logprobs):
        assert lp.token_id == token and len(lp.top) == 3
        assert lp.top[0][0] == token and lp.top[0][1] == pytest.approx(lp.logprob)
        values = [v for _, v in lp.top]
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)


def _reference_penalized(path, prompt, n, repetition=1.0, presence=0.0, frequency=0.0):
    """Greedy decoding with penalties, computed with HF transformers' forward pass."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    generated = []
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        for _ in range(n):
            logits = out.logits[0, -1].clone()
            seen = torch.tensor(sorted(set(prompt + generated)))
            picked = logits[seen]
            logits[seen] = torch.where(picked > 0, picked / repetition, picked * repetition)
            counts = torch.zeros_like(logits)
            for t in generated:
                counts[t] += 1
            logits -= frequency * counts + presence * (counts > 0).float()
            token = int(logits.argmax())
            generated.append(token)
            out = hf_next(model, out, token)
    return generated


@pytest.mark.parametrize(
    "penalties",
    [
        dict(repetition_penalty=1.5),
        dict(frequency_penalty=2.0, presence_penalty=1.0),
        dict(repetition_penalty=1.2, frequency_penalty=1.5, presence_penalty=-0.5),
    ],
)
def test_penalties_match_reference(llm, path, penalties):
    prompt = llm.engine.encode("Repeat after me")
    plain = _greedy(llm, prompt, 30).token_ids
    got = llm.generate([prompt], SamplingParams(max_tokens=30, **penalties, **GREEDY))[0].token_ids
    expected = _reference_penalized(
        path,
        prompt,
        30,
        penalties.get("repetition_penalty", 1.0),
        penalties.get("presence_penalty", 0.0),
        penalties.get("frequency_penalty", 0.0),
    )
    assert got == expected
    assert got != plain


def test_abort_frees_the_request(llm):
    stream = llm.engine.submit("Abort me", SamplingParams(max_tokens=100000, **GREEDY))
    events = []
    for event in stream:
        events.append(event)
        if len(events) == 3:
            stream.abort()
    assert events[-1].finish_reason == "abort"
    assert len(events) < 1000
    assert _greedy(llm, "Still alive", 4).finish_reason == "length"
    assert len(llm.engine.runner.batch) == 0
    assert not llm.engine.scheduler.has_work()


def test_stats_follow_a_request(llm):
    """Engine.stats(): a decoding request counts as running and holds KV; none once it ends."""
    stream = llm.engine.submit("Count me", SamplingParams(max_tokens=100000, **GREEDY))
    it = iter(stream)
    next(it)
    next(it)  # decoding: the engine thread published its second token
    during = llm.engine.stats(held_blocks=True)
    stream.abort()
    for _ in it:
        pass
    assert during.active == 1 and during.running == 1 and during.waiting == 0
    assert during.kv_tokens > 0
    after = llm.engine.stats()
    assert (after.active, after.running, after.decode_rows, after.kv_tokens) == (0, 0, 0, 0)
    assert after.cache["lookups"]["lookups"] >= 1 and after.fingerprint is not None


def test_long_prompt_does_not_stall_running_streams(path):
    with LLM(path, step_token_budget=16, prefill_chunk_size=16) as llm:
        running = llm.engine.submit("keep going", SamplingParams(max_tokens=400, **GREEDY))
        it = iter(running)
        next(it)
        long_prompt = list(range(10, 10 + 600))
        late = llm.engine.submit(long_prompt, SamplingParams(max_tokens=1, **GREEDY))
        first_late = threading.Event()
        during = []

        def watch():
            for _ in late:
                pass
            first_late.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        for event in it:
            if first_late.is_set():
                break
            during.append(event)
        watcher.join()
        running.abort()
        # 600 prompt tokens at <= 15 a step take >= 40 steps; the running stream decodes in each.
        assert len(during) >= 30


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(max_tokens=0), "max_tokens"),
        (dict(temperature=-1), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(top_k=-3), "top_k"),
        (dict(min_p=2), "min_p"),
        (dict(repetition_penalty=0), "repetition_penalty"),
        (dict(presence_penalty=3), "presence_penalty"),
        (dict(frequency_penalty="a"), "frequency_penalty"),
        (dict(seed=1.5), "seed"),
        (dict(stop=[""]), "stop"),
        (dict(stop=[3]), "stop"),
        (dict(stop_token_ids=[-1]), "stop_token_ids"),
        (dict(logprobs=100), "logprobs"),
    ],
)
def test_invalid_sampling_params(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**kwargs)


def test_invalid_prompts(llm):
    with pytest.raises(ValueError, match="empty"):
        llm.engine.submit("", SamplingParams())
    with pytest.raises(ValueError, match="vocabulary"):
        llm.engine.submit([10**9], SamplingParams())
    with pytest.raises(ValueError, match="string or a list"):
        llm.engine.submit(3.5, SamplingParams())
    with pytest.raises(ValueError, match="context"):
        llm.engine.submit([5] * 100000, SamplingParams())


def test_one_context_limit(llm):
    """The limit is the model's own context or a smaller context_length setting; the error names
    which one the prompt broke."""
    engine = llm.engine
    own = engine.loaded.context_length
    assert engine.context_limit() == own == engine.context_limit(own + 10)
    assert engine.context_limit(24) == 24
    assert engine.validate_prompt([5] * 23, 24) == [5] * 23
    with pytest.raises(ValueError, match=r"is 24 tokens \(its context_length setting\); the prompt has 24"):
        engine.validate_prompt([5] * 24, 24)
    with pytest.raises(ValueError, match=f"is {own} tokens; the prompt has {own}"):
        engine.validate_prompt([5] * own, own + 10)
    with pytest.raises(ValueError, match=f"is {own} tokens; the prompt has {own}"):
        engine.validate_prompt([5] * own, own)  # the same limit: the model's own is named


def test_invalid_engine_settings(path):
    with pytest.raises(ValueError, match="step_token_budget"):
        LLM(path, max_concurrent_requests=8, step_token_budget=4)
    with pytest.raises(ValueError, match="dtype"):
        LLM(path, dtype="int8")


def test_broken_model_folders(tmp_path, path):
    with pytest.raises(ModelLoadError, match="not a directory"):
        LLM(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        LLM(empty)
    bad_json = tmp_path / "bad_json"
    bad_json.mkdir()
    (bad_json / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        LLM(bad_json)
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    with pytest.raises(ModelLoadError, match="not supported"):
        LLM(unknown)
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(ModelLoadError, match="no weights"):
        LLM(no_weights)
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    for f in path.iterdir():
        (truncated / f.name).write_bytes(f.read_bytes())
    weights = next(truncated.glob("model*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="cannot load the weights"):
        LLM(truncated)
    wrong_shape = tmp_path / "wrong_shape"
    wrong_shape.mkdir()
    for f in path.iterdir():
        (wrong_shape / f.name).write_bytes(f.read_bytes())
    config = json.loads((wrong_shape / "config.json").read_text())
    config["hidden_size"] *= 2
    (wrong_shape / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="cannot load the weights"):
        LLM(wrong_shape)


@pytest.mark.parametrize("filters", [dict(top_k=1), dict(top_p=1e-6), dict(min_p=1.0)])
def test_filters_that_keep_one_token_equal_greedy(llm, filters):
    greedy = _greedy(llm, "Filters", 16).token_ids
    sampled = llm.generate(
        ["Filters"], SamplingParams(temperature=5.0, seed=3, max_tokens=16, ignore_eos=True, **filters)
    )[0].token_ids
    assert sampled == greedy
    unfiltered = [
        llm.generate(["Filters"], SamplingParams(temperature=5.0, seed=s, max_tokens=16, ignore_eos=True))[
            0
        ].token_ids
        for s in range(3)
    ]
    assert any(u != greedy for u in unfiltered)


def test_submit_from_many_threads(llm):
    prompts = [f"thread number {i}" for i in range(12)]
    expected = [r.token_ids for r in llm.generate(prompts, SamplingParams(max_tokens=8, **GREEDY))]
    got = [None] * len(prompts)

    def run(i):
        got[i] = [
            t
            for e in llm.engine.submit(prompts[i], SamplingParams(max_tokens=8, **GREEDY))
            for t in e.token_ids
        ]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected
