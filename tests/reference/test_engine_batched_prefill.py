"""Batched prefill: the prompt chunks of several requests in one forward pass (left-padded
histories of different lengths, right-padded chunks of different lengths) give the tokens that
one-by-one prefill gives and that HF transformers gives, with and without prefix-cache hits of
different lengths; seeded sampling gives the same tokens in a batch as alone; and the first
token of a prompt comes from the logits of its last prefill chunk (no extra forward pass)."""

import json
import threading

import numpy as np
import pytest

from inference.engine import LLM, SamplingParams
from tests.support.engine_control import hold
from tests.support.hf_reference import hf_greedy

NEW = 8
GREEDY = dict(temperature=0, max_tokens=NEW, ignore_eos=True)
# Plain attention, sliding-window attention (gemma3_text) and a Gated DeltaNet hybrid (qwen3_5):
# their chunks are batched. nemotron_h's Mamba2 layers ignore mlx-lm's padding mask, so its
# batched prefill fails the load-time check and it prefills one by one
# (test_a_family_whose_layers_ignore_the_padding_prefills_one_by_one).
FAMILIES = {
    "qwen2": "factory",
    "llama": "factory",
    "qwen3_moe": "transformers",
    "gemma3_text": "transformers",
    "qwen3_5": "transformers",
}
PLAIN = ("qwen2", "llama", "qwen3_moe")


def _prompts(path, n=6):
    vocab = len(json.loads((path / "tokenizer.json").read_text())["model"]["vocab"])
    rng = np.random.default_rng(77)
    base = rng.integers(10, vocab, size=40).tolist()
    # Three share 12, 27 and 9 tokens with the warm-up prompts (hits that end inside a block of
    # 4: plain attention allows it), three share nothing; lengths from 1 to 45.
    return [
        base[:12] + rng.integers(10, vocab, size=9).tolist(),
        base[:27] + rng.integers(10, vocab, size=3).tolist(),
        base[:9] + rng.integers(10, vocab, size=30).tolist(),
        rng.integers(10, vocab, size=1).tolist(),
        rng.integers(10, vocab, size=45).tolist(),
        rng.integers(10, vocab, size=17).tolist(),
    ][:n], [base[:8], base[:28], base[:16]]


@pytest.fixture(scope="module")
def family(model_dir):
    built = {}

    def get(arch):
        if arch not in built:
            if FAMILIES[arch] == "transformers":
                from inference.testkit.hf import load_transformers

                path = model_dir(arch=arch, preset="tiny")
                load = load_transformers
            else:
                path, load = model_dir(arch=arch, preset="tiny"), None
            prompts, warm = _prompts(path)
            built[arch] = path, prompts, warm, hf_greedy(path, prompts, NEW, load=load)
        return built[arch]

    return get


def _shared_passes(llm) -> bool:
    """Whether some prefill forward pass computed more than one request's tokens."""
    prefill = llm.engine.runner.prefiller
    return prefill.forwards < prefill.rows


def _generate(llm, prompts, **params):
    results = llm.generate(prompts, SamplingParams(**{**GREEDY, **params}))
    assert all(r.error is None for r in results), [r.error for r in results]
    return results


@pytest.mark.parametrize("chunk", [512, 5])
@pytest.mark.parametrize("arch", sorted(FAMILIES))
def test_batched_prefill_equals_one_by_one_and_transformers(family, arch, chunk):
    path, prompts, warm, expected = family(arch)
    with LLM(path, prefix_cache=False, max_concurrent_requests=1) as alone:
        one_by_one = [r.token_ids for r in _generate(alone, prompts)]
        assert not _shared_passes(alone)  # nothing shared a pass
    assert one_by_one == expected

    with LLM(path, prefix_cache=False, prefill_chunk_size=chunk, step_token_budget=4096) as llm:
        got = [r.token_ids for r in _generate(llm, prompts)]
        assert _shared_passes(llm)  # chunks shared passes
    assert got == expected

    # Cache hits of different lengths, none for three of them, all in one batch.
    with LLM(path, cache_block_size=4, prefill_chunk_size=chunk, step_token_budget=4096) as llm:
        _generate(llm, warm, max_tokens=1)
        results = _generate(llm, prompts)
        hits = [r.usage.cached_tokens for r in results]
        assert [r.token_ids for r in results] == expected
        assert _shared_passes(llm)
    if arch in PLAIN:
        assert hits == [12, 27, 9, 0, 0, 0]
    else:  # a hit ends where the windows or states were kept: block boundaries, one before the end
        assert hits[3:] == [0, 0, 0] and all(0 < h <= want for h, want in zip(hits, [12, 27, 9]))


@pytest.mark.parametrize("arch", ["qwen2", "gemma3_text", "qwen3_5"])
def test_rows_of_different_lengths_split_into_passes_of_similar_lengths(family, arch):
    """With a pass worth 16 prompt tokens (set by hand: the speeds it is learned from differ
    from machine to machine), six prompts of 1 to 45 tokens admitted together prefill in three
    passes (1 | 17, 21 | 30, 39, 45 tokens), shortest first; the output equals transformers';
    and each prompt's first token is sent right after its own pass, before the passes of
    longer ones (callbacks run on the engine thread, so the pass count they read is exact)."""
    path, prompts, _, expected = family(arch)
    with LLM(path, prefix_cache=False, step_token_budget=4096) as llm:
        engine = llm.engine
        engine.call(lambda e: setattr(e.scheduler.costs, "pass_tokens", lambda: 16))
        prefill = engine.runner.prefiller
        base = engine.call(lambda e: e.runner.prefiller.forwards)
        at_first, results, done = {}, {}, threading.Event()

        def callback(i):
            def on_event(event):
                if event.token_ids and i not in at_first:
                    at_first[i] = prefill.forwards - base
                results.setdefault(i, []).extend(event.token_ids)
                if (
                    event.finished
                    and len(results) == len(prompts)
                    and all(len(t) == NEW for t in results.values())
                ):
                    done.set()

            return on_event

        release = hold(engine)
        for i, prompt in enumerate(prompts):
            engine.submit(prompt, SamplingParams(**GREEDY), callback=callback(i))
        release.set()
        assert done.wait(120)
        passes = prefill.forwards - base
    assert [results[i] for i in range(len(prompts))] == expected
    assert passes == 3
    by_length = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    assert [at_first[i] for i in by_length] == [1, 2, 2, 3, 3, 3]


def test_a_family_whose_layers_ignore_the_padding_prefills_one_by_one(model_dir):
    """nemotron_h's Mamba2 mixer folds right padding into its state: the load-time check sees
    that the batched path does not reproduce one-by-one logits and turns it off, and the
    output still equals transformers'."""
    from inference.testkit.hf import load_transformers

    path = model_dir(arch="nemotron_h", preset="tiny")
    prompts, _ = _prompts(path, n=4)
    with LLM(path, prefix_cache=False) as llm:
        assert not llm.engine.runner.prefiller.together
        got = [r.token_ids for r in _generate(llm, prompts)]
        assert not _shared_passes(llm)
    assert got == hf_greedy(path, prompts, NEW, load=load_transformers)


def test_seeded_sampling_is_the_same_in_a_batch_as_alone(family):
    path, prompts, _, _ = family("qwen2")
    params = dict(temperature=0.9, top_p=0.95, max_tokens=NEW, ignore_eos=True)
    with LLM(path, prefix_cache=False) as llm:
        seeded = [SamplingParams(seed=100 + i, **params) for i in range(len(prompts))]
        together = llm.generate(prompts, seeded)
        alone = [llm.generate([p], [s])[0] for p, s in zip(prompts, seeded)]
        assert _shared_passes(llm)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert len({tuple(r.token_ids) for r in together}) > 1


def test_first_token_needs_no_forward_pass_of_its_own(family):
    """A one-chunk prompt costs one forward pass: its first token is sampled from that pass's
    logits of its last token (before, the last prompt token ran again on its own)."""
    path, prompts, _, _ = family("qwen2")
    with LLM(path, prefix_cache=False, max_concurrent_requests=1) as llm:
        calls = llm.engine.call(_count_forwards)
        _generate(llm, prompts[:1], max_tokens=1)
        assert calls == [1, 21]  # one pass: the batch of one with all 21 prompt tokens


def _count_forwards(engine):
    """Record the number of rows and tokens of every forward pass of the model."""
    seen = []
    model = engine.runner.model
    original = type(model).__call__

    class Counting(type(model)):
        def __call__(self, inputs, *args, **kwargs):
            seen.extend(inputs.shape)
            return original(self, inputs, *args, **kwargs)

    model.__class__ = Counting
    return seen
