"""Where a speculative step's time goes on the edit workload (bench_speculative's prompts, the
float32 SmolLM2 copy), issue 27: the policy's calls and the parts of a verify pass (building it,
the forward pass and its wait, acceptance, rollback) timed by wrapping them, plus how many rows
drafted, how wide the passes were, and the policy's measured cost of a drafted position. A
profiling aid: its ``verify_step`` mirrors ``speculative.verify.verify_step`` for greedy rows
(keep the two in step).

    PYTHONPATH=. OMLX_HOME=/tmp/omlx-shared-smollm2 .venv/bin/python benchmarks/profile_speculative.py \
        --streams 16 --tokens 48
"""

import sys
import time
import collections
import argparse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import inference  # noqa: F401
import mlx.core as mx
import bench_speculative as b
from inference.engine import LLM, SamplingParams
from inference.engine.speculative import batch_step, verify as V, policy as P
from inference.engine import model_runner as MR

T = collections.defaultdict(float)
N = collections.Counter()


def timed(name, f):
    def g(*a, **k):
        t = time.perf_counter()
        r = f(*a, **k)
        T[name] += time.perf_counter() - t
        N[name] += 1
        return r

    return g


orig_verify_step = V.verify_step


def verify_step(forward, inputs, drafts, states, caches, counters, padding_ok=True):
    t0 = time.perf_counter()
    width = 1 + max(len(d) for d in drafts)
    rows = [[tok, *d] + [tok] * (width - 1 - len(d)) for tok, d in zip(inputs, drafts)]
    rb = V.Rollback(caches, padding_ok)
    logits = forward(mx.array(rows, dtype=mx.uint32)).astype(mx.float32)
    targets = mx.argmax(logits, axis=-1)
    t1 = time.perf_counter()
    T["v.build"] += t1 - t0
    mx.eval(targets)
    host = targets.tolist()
    t2 = time.perf_counter()
    T["v.forward_eval"] += t2 - t1
    emitted = []
    for i, (d, s) in enumerate(zip(drafts, states)):
        tk = V.greedy_tokens(host[i], d)
        s.step += len(tk)
        emitted.append(tk)
    t3 = time.perf_counter()
    T["v.accept"] += t3 - t2
    rb.apply([width - len(t) for t in emitted], rows, forward)
    t4 = time.perf_counter()
    T["v.rollback"] += t4 - t3
    N["v"] += 1
    N[f"width{width}"] += 1
    N["rows_drafting"] += sum(1 for d in drafts if d)
    N["rows"] += len(drafts)
    N["drafted"] += sum(len(d) for d in drafts)
    N["accepted"] += sum(len(t) - 1 for t in emitted)
    if width > 1:
        counters.verify_passes += 1
        counters.drafted += sum(len(d) for d in drafts)
        counters.accepted += sum(len(t) - 1 for t in emitted)
        counters.emitted += sum(len(t) for t in emitted)
    return emitted


batch_step.verify_step = verify_step
for name in ("wanted", "ready", "drafts", "observe"):
    setattr(P.SpeculationPolicy, name, timed("p." + name, getattr(P.SpeculationPolicy, name)))
batch_step.SpeculativeSteps._verify = timed("step.verify", batch_step.SpeculativeSteps._verify)
orig_step = MR.DecodeBatch.step


def step(self, ahead=True):
    t = time.perf_counter()
    r = orig_step(self, ahead)
    dt = time.perf_counter() - t
    k = "step.total_verify" if self.verified else "step.total_plain"
    T[k] += dt
    N[k] += 1
    return r


MR.DecodeBatch.step = step

ap = argparse.ArgumentParser()
ap.add_argument("--streams", type=int, default=1)
ap.add_argument("--tokens", type=int, default=128)
ap.add_argument("--k", type=int, default=4)
ap.add_argument("--methods", default="off,lookup")
ap.add_argument("--lines", type=int, default=300)
a = ap.parse_args()
folder = b.float32_copy(b.smollm2_folder())
with LLM(folder, max_concurrent_requests=16, step_token_budget=4096) as llm:
    prompts = [b.edit_prompt(llm.tokenizer, a.lines, s) for s in range(a.streams)]
    b.run(llm, prompts, 8, "off")
    for m in a.methods.split(","):
        T.clear()
        N.clear()
        params = SamplingParams(
            max_tokens=a.tokens, temperature=0, ignore_eos=True, speculative=m, num_draft_tokens=a.k
        )
        t = time.perf_counter()
        res = llm.generate(prompts, [params] * len(prompts))
        wall = time.perf_counter() - t
        first = min(r.time_to_first_token for r in res)
        dec = sum(len(r.token_ids) - 1 for r in res)
        print(f"== {m} k={a.k} streams={a.streams}: {dec / (wall - first):.2f} tok/s wall {wall:.2f}s")
        for k in sorted(T):
            n = N["v"] if k.startswith("v.") else N[k]  # (the parts of a pass: per verify pass)
            print(f"   {k:22s} {T[k]:8.3f}s  n={n}  per={T[k] / max(n, 1) * 1000:.1f}ms")
        print("   ", {k: v for k, v in N.items() if not k.startswith(("p.", "step."))})
        pol = llm.engine.call(
            lambda e: (
                e.runner.speculation.position_seconds,
                e.runner.speculation.costs.decode_seconds,
                e.runner.speculation.costs.token_seconds,
            )
        )
        print("    position_seconds, decode_seconds, token_seconds:", pol, flush=True)
