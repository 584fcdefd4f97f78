"""The agentic scenario (inference.bench.agentic): the closed loop and bursts, histories that
grow by the answer as the server returned it, the prompt tokens and cached tokens the target
reports, in-process and over HTTP against a live `omlx serve` and a live mlx-lm server, and
`omlx bench --scenario agentic` as the real command line."""

import json
import os
import threading

import pytest

from inference.bench import (
    AGENTIC_PRESETS,
    AgenticSettings,
    EngineTarget,
    OpenAITarget,
    Target,
    TargetError,
    plan_bursts,
    run_agentic,
)
from tests.live.test_bench import omlx_bench

SMALL = AGENTIC_PRESETS["small"]  # 3 conversations x 2 turns, 64-token system prompt, 2 in flight, closed
THREE_TURNS = AgenticSettings(
    conversations=3, turns=3, system_tokens=64, context_tokens=16, new_tokens=16, gen_tokens=6, burst=2
)


def test_bursts_and_settings():
    bursts = plan_bursts(12, 3, 4)  # the load of issue 12: 9 bursts of 4, turn by turn
    assert [len(b) for b in bursts] == [4] * 9
    assert [(c, t) for b in bursts for c, t in b] == [(c, t) for t in range(3) for c in range(12)]
    # never two turns of one conversation in a burst: the next turn waits for the answer
    assert plan_bursts(3, 2, 4) == [[(0, 0), (1, 0), (2, 0)], [(0, 1), (1, 1), (2, 1)]]
    assert plan_bursts(3, 2, 2) == [[(0, 0), (1, 0)], [(2, 0), (0, 1)], [(1, 1), (2, 1)]]
    assert plan_bursts(1, 3, 4) == [[(0, 0)], [(0, 1)], [(0, 2)]]
    for bursts in (plan_bursts(5, 4, 3), plan_bursts(2, 5, 8)):
        for i, burst in enumerate(bursts):
            assert len({c for c, _ in burst}) == len(burst)
            for c, t in burst:  # turn t of c comes in a later burst than turn t - 1
                assert t == 0 or any((c, t - 1) in earlier for earlier in bursts[:i])
    # the load of issue 24 (and 12), closed loop by default
    assert AgenticSettings() == AgenticSettings(
        conversations=12,
        turns=3,
        system_tokens=1024,
        context_tokens=128,
        new_tokens=64,
        gen_tokens=32,
        burst=4,
        mode="closed",
    )
    assert AgenticSettings.from_dict(SMALL.to_dict()) == SMALL
    assert SMALL.mode == "closed" and SMALL.total_steps() == 1 + 6  # a step per request
    assert AgenticSettings(**dict(SMALL.to_dict(), mode="burst")).total_steps() == 1 + 3  # a step per burst
    for bad in (
        {"conversations": 0},
        {"burst": 0},
        {"turns": "2"},
        {"system_tokens": 8},
        {"ignore_eos": 1},
        {"mode": "open"},
    ):
        with pytest.raises(ValueError):
            AgenticSettings(**bad)
    # gen_spread: each turn's length drawn from its conversation and turn alone, within the spread
    spread = AgenticSettings(gen_tokens=32, gen_spread=8)
    lengths = [spread.gen_tokens_of(c, t) for c in range(12) for t in range(3)]
    assert all(24 <= n <= 40 for n in lengths) and len(set(lengths)) > 5
    assert lengths == [
        AgenticSettings(gen_tokens=32, gen_spread=8).gen_tokens_of(c, t) for c in range(12) for t in range(3)
    ]
    assert {AgenticSettings().gen_tokens_of(c, t) for c in range(12) for t in range(3)} == {32}
    for bad in ({"gen_spread": 32}, {"gen_spread": -1}, {"gen_spread": 4, "mode": "burst"}):
        with pytest.raises(ValueError, match="gen_spread"):
            AgenticSettings(**bad)
    with pytest.raises(ValueError, match="unknown agentic settings: nope"):
        AgenticSettings.from_dict({"nope": 1})


def reference_tokens(folder):
    """Prompt tokens of a conversation by the model's own tokenizer and template (transformers,
    not omlx's code): the template rendered with the generation prompt, no added special tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    def count(messages):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(tokenizer.encode(text, add_special_tokens=False))

    def encode(text):
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count, encode


def check_agentic(results, settings, transcripts, folder, cached="omlx"):
    """What every run has, whoever the target. ``cached``: "omlx" (the whole previous prompt is
    reused on the next turn) or "reported" (a number, whatever it is)."""
    assert results["version"] == 3 and results["scenario"] == "agentic" and results["errors"] == []
    assert results["settings"] == settings.to_dict() and results["finished_at"] and results["duration_s"] > 0
    n, turns = settings.conversations, settings.turns
    total = results["summary"]
    assert (
        total["requests"] == total["sent"] == total["ok"] == n * turns
        and total["errors"] == total["skipped"] == 0
    )
    lengths = {
        (c, t): settings.gen_tokens_of(c - 1, t - 1) for c in range(1, n + 1) for t in range(1, turns + 1)
    }
    assert total["output_tokens"] == sum(lengths.values())  # ignore_eos: exactly gen_tokens per turn
    for name in ("ttft_s", "itl_s", "latency_s"):
        s = total[name]
        assert 0 <= s["p50"] <= s["p95"] <= s["p99"] <= s["max"], (name, s)
    assert total["output_tokens_per_s"] == pytest.approx(total["output_tokens"] / total["wall_s"])
    rows = results["requests"]
    assert sorted((r["conversation"], r["turn"]) for r in rows) == [
        (c, t) for c in range(1, n + 1) for t in range(1, turns + 1)
    ]
    assert total["prompt_tokens"] == sum(r["prompt_tokens"] for r in rows)
    assert total["cached_tokens"] is not None, "the target reported no cached tokens"
    assert total["cached_tokens"] == sum(r["cached_tokens"] for r in rows)
    assert total["computed_tokens"] == total["prompt_tokens"] - total["cached_tokens"]
    assert [t["turn"] for t in results["turns"]] == list(range(1, turns + 1))
    assert all(r["completion_tokens"] == lengths[r["conversation"], r["turn"]] for r in rows)
    assert all(r["decode_s"] >= 0 for r in rows)
    for r in rows:  # request latency: sent to last token, so its TTFT and decode time are inside it
        assert r["latency_s"] == pytest.approx(r["ended_s"] - r["sent_s"]) and r["latency_s"] >= r["ttft_s"]
        assert r["latency_s"] == pytest.approx(r["ttft_s"] + r["decode_s"])
    closed = settings.mode == "closed"
    assert all((r["client"] is not None, r["burst"] is None) == (closed, closed) for r in rows)
    for c in range(1, n + 1):  # by order, in both modes: a conversation's turn t + 1 after turn t ended
        mine = sorted((r for r in rows if r["conversation"] == c), key=lambda r: r["turn"])
        assert all(b["sent_s"] >= a["ended_s"] for a, b in zip(mine, mine[1:])), mine

    count, encode = reference_tokens(folder)
    # the template's own tokens around one more assistant answer and user message
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    more = base + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
    template = count(more) - count(base) - encode("a") - encode("v")
    assert len(transcripts) == n
    for c, messages in enumerate(transcripts, start=1):
        assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * turns
        assert messages[0]["content"] == transcripts[0][0]["content"]  # one shared system prompt
        mine = sorted((r for r in rows if r["conversation"] == c), key=lambda r: r["turn"])
        for t, row in enumerate(mine):
            sent = messages[: 2 + 2 * t]  # what turn t + 1 sent: the history, its answers included
            assert row["prompt_tokens"] == count(sent), (c, t)
            if t == 0:
                assert row["prompt_growth"] is None
                continue
            answer, new = messages[2 * t], messages[2 * t + 1]
            assert answer["role"] == "assistant" and answer["content"].strip()
            # the history grew by exactly the previous answer, the new text and the template's tokens
            assert row["prompt_growth"] == encode(answer["content"]) + encode(new["content"]) + template, (
                c,
                t,
            )
            assert row["prompt_growth"] >= settings.new_tokens // 2 + 1
            if cached == "omlx":  # the whole previous prompt comes from the cache
                assert row["cached_tokens"] >= mine[t - 1]["prompt_tokens"], (c, t, row)
            assert row["cached_tokens"] is not None and row["cached_tokens"] > 0
    turn1 = results["turns"][0]["prompt_tokens"]["p50"]
    wanted = settings.system_tokens + settings.context_tokens + settings.new_tokens
    assert wanted * 0.8 <= turn1 <= wanted * 1.6 + 60, (turn1, results["prompts"])  # about the sizes asked


def test_in_process(model_dir):
    folder = model_dir("qwen2", "tiny")
    transcripts = []
    steps = []
    target = EngineTarget.from_folder(folder, "tiny", settings={"paged_ssd_cache_dir": None})
    with target:
        results = run_agentic(target, THREE_TURNS, lambda d, t, m, partial: steps.append((d, t)), transcripts)
        assert target.engine.num_active() == 0
    check_agentic(results, THREE_TURNS, transcripts, folder)
    total = results["summary"]
    assert results["target"]["kind"] == "local"
    # the engine tells the tiers apart: without an SSD tier every cached token came from RAM
    assert total["hot_cached_tokens"] == total["cached_tokens"] and total["cold_cached_tokens"] == 0
    assert [d for d, _ in steps] == list(range(THREE_TURNS.total_steps() + 1))
    # ...and says where each request's time went; the phases before the first token add up to
    # the engine's share of the TTFT the client measured (the client's also has the hand-off)
    phases = total["phases_s"]
    assert set(phases) == {"queue", "restore", "prefill", "prefill_wait", "decode"}
    assert phases["prefill"] > 0 and phases["decode"] > 0 and phases["restore"] > 0  # turns 2, 3 hit
    for row in results["requests"]:
        t = row["timings"]
        assert min(t.values()) >= 0
        assert t["queue"] + t["restore"] + t["prefill"] + t["prefill_wait"] <= row["ttft_s"] + 1e-3


def test_in_process_answers_of_varied_lengths(model_dir):
    """``gen_spread``: each turn generates the tokens drawn for it (check_agentic counts them)."""
    folder = model_dir("qwen2", "tiny")
    settings = AgenticSettings(**dict(THREE_TURNS.to_dict(), gen_tokens=8, gen_spread=5))
    assert len({settings.gen_tokens_of(c, t) for c in range(3) for t in range(3)}) > 2
    transcripts = []
    with EngineTarget.from_folder(folder, "tiny", settings={"paged_ssd_cache_dir": None}) as target:
        results = run_agentic(target, settings, transcripts=transcripts)
    check_agentic(results, settings, transcripts, folder)


class HeldTarget(Target):
    """An engine target that holds the answer to the first conversation's first turn (the first
    run request it gets) until another conversation has sent its second turn; it logs, in order,
    ("sent" | "answered", conversation, turn), 0-based, conversations numbered as first seen."""

    GUARD = 60.0  # seconds: only a loop that waits for every client ever gets here

    def __init__(self, inner):
        self.inner, self.log, self.held, self.names = inner, [], None, {}
        self.lock, self.other_moved = threading.Lock(), threading.Event()

    def describe(self):
        return self.inner.describe()

    def count_chat_tokens(self, messages):
        return self.inner.count_chat_tokens(messages)

    def chat(self, conversations, max_tokens, ignore_eos=True):
        messages = conversations[0]
        if len(conversations) != 1 or messages[0]["role"] != "system":  # the warm-up, a burst
            return self.inner.chat(conversations, max_tokens, ignore_eos)
        turn = (len(messages) - 2) // 2
        with self.lock:
            key = self.names.setdefault(messages[1]["content"], len(self.names))
            self.log.append(("sent", key, turn))
            self.held = key if self.held is None else self.held
            if key != self.held and turn == 1:
                self.other_moved.set()
        results = self.inner.chat(conversations, max_tokens, ignore_eos)
        if key == self.held and turn == 0:
            self.other_moved.wait(self.GUARD)
        with self.lock:
            self.log.append(("answered", key, turn))
        return results


def test_closed_loop_sends_each_turn_after_its_own_answer(model_dir):
    """Two clients, two conversations of two turns: each client sends its turn 2 once its own
    turn 1 has been answered, without waiting for the other's. Checked by order only: the log of
    the target and the recorded send / end times."""
    settings = AgenticSettings(
        conversations=2,
        turns=2,
        system_tokens=64,
        context_tokens=16,
        new_tokens=16,
        gen_tokens=4,
        burst=2,
        mode="closed",
    )
    folder = model_dir("qwen2", "tiny")
    with EngineTarget.from_folder(folder, "tiny", settings={"paged_ssd_cache_dir": None}) as inner:
        target = HeldTarget(inner)
        transcripts = []
        results = run_agentic(target, settings, transcripts=transcripts)
    check_agentic(results, settings, transcripts, folder)
    log = target.log
    keys = sorted({key for _, key, _ in log})
    assert keys == [0, 1] and len(log) == 8 and target.held == 0, log
    for key in keys:  # a conversation's turn 2 is sent after its turn 1 was answered
        assert log.index(("sent", key, 1)) > log.index(("answered", key, 0)), log
    held, other = target.held, next(k for k in keys if k != target.held)
    # ...and the other client did not wait for the held answer: its turn 2 went first
    assert log.index(("sent", other, 1)) < log.index(("answered", held, 0)), log
    rows = results["requests"]
    assert sorted(r["client"] for r in rows) == [1, 1, 2, 2]
    for client in (1, 2):  # the recorded times, per client, by order
        mine = sorted((r for r in rows if r["client"] == client), key=lambda r: r["sent_s"])
        assert [r["turn"] for r in mine] == [1, 2] and len({r["conversation"] for r in mine}) == 1
        assert mine[0]["sent_s"] <= mine[0]["ended_s"] <= mine[1]["sent_s"] <= mine[1]["ended_s"], mine
    latency = results["summary"]["latency_s"]
    assert latency["p50"] is not None and latency["p50"] <= latency["p95"]


def test_url_omlx_serve(omlx_server, model_dir):
    """In bursts (the closed loop runs in-process and through the command line)."""
    bursts = AgenticSettings(**dict(SMALL.to_dict(), mode="burst"))
    transcripts = []
    with OpenAITarget(omlx_server.url, "tiny") as target:
        results = run_agentic(target, bursts, transcripts=transcripts)
    check_agentic(results, bursts, transcripts, model_dir("qwen2", "tiny"))
    assert sorted(r["burst"] for r in results["requests"]) == [1, 1, 2, 2, 3, 3]
    assert results["target"]["url"] == omlx_server.url + "/v1"
    # over HTTP omlx reports cached tokens, not which tier they came from
    assert (
        results["summary"]["hot_cached_tokens"] is None
        and results["requests"][0]["hot_cached_tokens"] is None
    )
    assert results["summary"]["phases_s"] is None  # nor the engine's phases


def test_url_errors(omlx_server):
    with OpenAITarget(omlx_server.url, "no-such-model") as target:
        with pytest.raises(TargetError, match="HTTP 404.*no-such-model"):
            run_agentic(target, SMALL)


@pytest.fixture(scope="module")
def mlx_lm_server(model_dir, tmp_path_factory):
    """mlx-lm's own server (mlx_lm.server) on the tiny model, as benchmarks/bench_agentic.py runs it."""
    from benchmarks.bench_servers import mlx_lm_argv, running

    folder = model_dir("qwen2", "tiny")
    with running(lambda port: mlx_lm_argv(port, folder)) as (_, url):
        yield url, folder


def test_url_mlx_lm_server(mlx_lm_server):
    """The same run measures mlx-lm's server: it gets logit_bias against end-of-sequence in place
    of ignore_eos (which it does not know), as bench_agentic.py sends it."""
    from benchmarks.bench_agentic import eos_ids

    url, folder = mlx_lm_server
    transcripts = []
    bias = {str(i): -1e4 for i in eos_ids(folder)}
    with OpenAITarget(url, "default_model", extra_body={"logit_bias": bias}) as target:
        results = run_agentic(target, SMALL, transcripts=transcripts)
    check_agentic(results, SMALL, transcripts, folder, cached="reported")


def test_cli_url(tmp_path, omlx_server):
    out = omlx_bench(
        tmp_path,
        "--url",
        omlx_server.url,
        "--model",
        "tiny",
        "--scenario",
        "agentic",
        "--preset",
        "small",
        "--turns",
        "3",
        "--gen-tokens",
        "6",
        "--output",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    settings = AgenticSettings(**dict(SMALL.to_dict(), turns=3, gen_tokens=6))
    assert results["settings"] == settings.to_dict() and results["summary"]["ok"] == 9
    for key in (
        "ttft_s",
        "latency_s",
        "itl_s",
        "output_tokens_per_s",
        "prompt_tokens",
        "cached_tokens",
        "computed_tokens",
    ):
        assert results["summary"][key] is not None, key
    assert {
        "conversation",
        "turn",
        "burst",
        "client",
        "sent_s",
        "ttft_s",
        "decode_s",
        "ended_s",
        "latency_s",
        "prompt_tokens",
        "cached_tokens",
        "prompt_growth",
    } <= set(results["requests"][0])
    for text in (
        "3 conversations x 3 turns",
        "closed loop: 2 clients",
        "TTFT p50 ms",
        "ITL p50 ms",
        "latency p50 ms",
        "output tok/s",
        "computed vs reused",
        "per turn",
    ):
        assert text in out.stdout, (text, out.stdout)
    lines = out.stdout.splitlines()
    load = lines[lines.index("load") + 2].split()
    assert load[:4] == ["9", "9", "0", "0"]  # requests, ok, errors, skipped
    latency = results["summary"]["latency_s"]
    assert load[9:11] == [f"{latency['p50'] * 1000:.1f}", f"{latency['p95'] * 1000:.1f}"]
    reuse = lines[
        lines.index("prompt tokens: computed vs reused (usage.prompt_tokens_details.cached_tokens)") + 2
    ]
    summary = results["summary"]
    assert reuse.split()[:3] == [
        str(summary["prompt_tokens"]),
        str(summary["cached_tokens"]),
        str(summary["computed_tokens"]),
    ] and reuse.split()[-2:] == ["n/a", "n/a"]
    assert "Traceback" not in out.stderr


def test_cli_local_engine(tmp_path, model_dir):
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    os.symlink(model_dir("qwen2", "tiny"), home / "models" / "tiny")
    out = omlx_bench(
        home,
        "tiny",
        "--scenario",
        "agentic",
        "--preset",
        "small",
        "--mode",
        "burst",
        # 64 tokens a turn: the tiny model's answers loop within them, which lookup drafts
        # (drafting is decided by measured prices: with 8 a turn a run may never draft)
        "--gen-tokens",
        "64",
        "--speculative",
        "lookup",
        "--output",
        str(tmp_path / "r.json"),
    )
    assert out.returncode == 0, out.stderr
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["target"]["kind"] == "local" and results["summary"]["ok"] == 6
    assert results["settings"]["mode"] == "burst"
    # every request asked for lookup (the model's setting is off), and the engine's counters say so
    assert results["speculative"]["method"] == "lookup" and results["speculative"]["drafted_tokens"] > 0
    assert results["summary"]["hot_cached_tokens"] is not None  # the tiers, in-process
    assert "local engine" in out.stdout and "bursts of 2" in out.stdout and "4/4 burst 3/3" in out.stderr


def test_cli_errors(tmp_path):
    cases = [
        (
            ("tiny", "--scenario", "agentic", "--concurrency", "1,2"),
            "--concurrency is for the default scenario",
        ),
        (("tiny", "--scenario", "agentic", "--plot", "x.png"), "--plot is for the default scenario"),
        (("tiny", "--turns", "2", "--burst", "3"), "--turns, --burst are for --scenario agentic"),
        (("tiny", "--mode", "closed"), "--mode is for --scenario agentic"),
        (("tiny", "--scenario", "agentic", "--burst", "0"), "burst=0: must be an integer in [1, 256]"),
        (
            (
                "--url",
                "http://127.0.0.1:9/v1",
                "--model",
                "tiny",
                "--scenario",
                "agentic",
                "--endpoint",
                "completions",
            ),
            "always streams /v1/chat/completions",
        ),
    ]
    for args, message in cases:
        out = omlx_bench(tmp_path, *args)
        assert out.returncode == 1 and message in out.stderr and "Traceback" not in out.stderr, (
            args,
            out.stderr,
        )
