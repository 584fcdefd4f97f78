"""A discrete-event model of issue 24's closed loop, to compare step-composition rules cheaply.

C clients (4) each take the next conversation not yet started and send its turns one after the
other, each as soon as its own answer has ended (``inference.bench.agentic``'s closed mode). The
engine is serial, as on a CPU: a step computes the prompts the rule gives it (those computed in
one step share forward passes where the prefill's own split, ``inference.engine.prefill.passes``,
puts them together; a prompt's first token comes right after its pass, then it joins the decode
batch), then one decode pass of every row (a token each). An arrival is seen at the next step.
Costs are the measured ones of the Qwen2.5-0.5B-shaped model on this machine (docs/engine.md,
"What a step costs under an agent load"): a forward pass 0.35 s whatever it computes, 14 ms a
prompt token, a decode pass 0.27 s + 15 ms a row (0.33 s at 4 rows). A conversation's first
request computes ~210 tokens, the very first one the shared system prompt too (the other
clients' first requests wait for it, as ``share_inflight_prefixes`` makes them), a follow-up
~100; ``jitter`` spreads those lengths by up to that many tokens either way (seeded).

Rules (``RULES``):
- ``together``: every waiting prompt is computed in the next step (the rule before issue 24's
  prompts apart, without the follow-up hold);
- ``hold``: the same, with the follow-up hold (while an answer that ended less than a decode
  step ago has not been followed by an arrival, a newcomer's long prompt waits for it);
- ``one``: one prompt a step, oldest first;
- ``one-apart``: one prompt a step, and the step after one that finished a prompt computes none
  while rows decode: the scheduler's rule (``Scheduler._apart``).

    .venv/bin/python benchmarks/sim_closed_loop.py [--clients 4] [--conversations 12] [--turns 3]
        [--jitter 12]

prints TTFT p50, request latency p50/p95, output tokens/s, steps, steps with a prompt, prefill
passes and rows per decode pass for each rule (simulated seconds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference.engine.prefill import passes  # noqa: E402

RULES = ("together", "hold", "one", "one-apart")


@dataclass
class Costs:
    pass_s: float = 0.35
    token_s: float = 0.014
    decode_s: float = 0.27
    row_s: float = 0.015
    rtt_s: float = 0.005  # an answer's end to its client's next request reaching the engine

    def decode(self, rows: int) -> float:
        return self.decode_s + self.row_s * rows


@dataclass
class Load:
    clients: int = 4
    conversations: int = 12
    turns: int = 3
    system: int = 1024
    first: int = 210
    follow_up: int = 100
    gen: int = 32
    jitter: int = 12
    seed: int = 1


@dataclass
class Req:
    client: int
    tokens: int  # prompt tokens to compute
    sent: float
    waits_for: Optional["Req"] = None  # the owner of the shared system prompt
    first_at: Optional[float] = None
    end_at: Optional[float] = None
    made: int = 0
    done: int = 0  # prompt tokens computed


@dataclass
class Result:
    ttft: List[float] = field(default_factory=list)
    latency: List[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    prompt_steps: int = 0
    passes: int = 0
    decode_passes: int = 0
    row_steps: int = 0  # sum over decode passes of their rows
    # per step: (prompts it computed tokens of, rows decoding before it)
    composition: List[Tuple[int, int]] = field(default_factory=list)

    def summary(self) -> dict:
        def pct(xs, q):
            xs = sorted(xs)
            return xs[min(len(xs) - 1, int(q * len(xs)))]

        return {
            "ttft_p50": statistics.median(self.ttft),
            "latency_p50": statistics.median(self.latency),
            "latency_p95": pct(self.latency, 0.95),
            "tok_s": self.tokens / self.seconds,
            "steps": self.steps,
            "prompt_steps": self.prompt_steps,
            "passes": self.passes,
            "rows_per_decode": self.row_steps / max(1, self.decode_passes),
        }


def simulate(rule: str, load: Load = Load(), costs: Costs = Costs()) -> Result:
    """Run the closed loop under ``rule`` (``RULES``) until every turn has been answered."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}")
    rng = random.Random(load.seed)
    todo = list(range(load.conversations))
    turn = {}  # client -> (conversation, turn)
    owner: List[Optional[Req]] = [None]
    res = Result()
    now = 0.0
    inbox: List[Req] = []  # sent, not yet seen by the engine
    waiting: List[Req] = []
    rows: List[Req] = []
    ended: List[float] = []  # answers ended and not yet followed (the hold)
    last_prompt = False  # whether the step before computed a prompt

    def send(client: int, at: float) -> None:
        if client in turn and turn[client][1] + 1 < load.turns:
            conv, t = turn[client][0], turn[client][1] + 1
        elif todo:
            conv, t = todo.pop(0), 0
        else:
            return
        turn[client] = (conv, t)
        if t:
            tokens, waits = load.follow_up + rng.randint(-load.jitter, load.jitter), None
        elif owner[0] is None:
            tokens, waits = load.system + load.first, None
        else:
            tokens = load.first + rng.randint(-load.jitter, load.jitter)
            waits = owner[0] if owner[0].first_at is None else None
        r = Req(client, tokens, at, waits)
        if owner[0] is None:
            owner[0] = r
        inbox.append(r)

    for c in range(load.clients):
        send(c, 0.0)
    while inbox or waiting or rows:
        for r in [r for r in inbox if r.sent <= now]:
            inbox.remove(r)
            waiting.append(r)
            if ended and rule == "hold":
                ended.pop(0)
        ready = [r for r in waiting if r.waits_for is None or r.waits_for.first_at is not None]
        if rule == "hold":
            ended[:] = [e for e in ended if now - e < costs.decode(len(rows))]
            if ended and rows:
                window = costs.decode(len(rows))
                ready = [r for r in ready if costs.pass_s + r.tokens * costs.token_s <= window]
        if not ready and not rows:
            nxt = min([r.sent for r in inbox] + [e + costs.decode(0) for e in ended], default=None)
            if nxt is None:
                break
            now = max(now, nxt)
            continue
        if rule == "one-apart" and last_prompt and rows:
            ready = []
        prompts = ready[:1] if rule.startswith("one") else ready
        res.steps += 1
        res.composition.append((len(prompts), len(rows)))
        res.prompt_steps += bool(prompts)
        chunks = [(r, r.tokens - r.done) for r in prompts]
        last_prompt = False
        for group in passes(chunks, round(costs.pass_s / costs.token_s)):
            now += costs.pass_s + len(group) * max(n for _, n in group) * costs.token_s
            res.passes += 1
            for r, n in group:
                r.done += n
                if r.done == r.tokens:
                    waiting.remove(r)
                    r.first_at, r.made = now, 1
                    rows.append(r)
                    last_prompt = True
        if rows:
            now += costs.decode(len(rows))
            res.decode_passes += 1
            res.row_steps += len(rows)
            for r in list(rows):
                r.made += 1
                if r.made >= load.gen:
                    r.end_at = now
                    rows.remove(r)
                    res.ttft.append(r.first_at - r.sent)
                    res.latency.append(r.end_at - r.sent)
                    res.tokens += load.gen
                    ended.append(now)
                    send(r.client, now + costs.rtt_s)
    res.seconds = now
    return res


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--conversations", type=int, default=12)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--jitter", type=int, default=12)
    args = parser.parse_args()
    load = Load(clients=args.clients, conversations=args.conversations, turns=args.turns, jitter=args.jitter)
    head = "rule | TTFT p50 | latency p50 | latency p95 | tok/s | steps | prompt steps | passes | rows/decode"
    print(f"| {head} |")
    print("|---" * 9 + "|")
    for rule in RULES:
        s = simulate(rule, load).summary()
        print(
            f"| {rule} | {s['ttft_p50']:.2f} s | {s['latency_p50']:.2f} s | {s['latency_p95']:.2f} s | "
            f"{s['tok_s']:.2f} | {s['steps']} | {s['prompt_steps']} | {s['passes']} | "
            f"{s['rows_per_decode']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
