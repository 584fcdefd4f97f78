"""One model split across two ranks of MLX's ring backend on loopback (inference.distributed):
what the ranks write equals what one process writes."""

import json

import pytest

from inference.distributed.generate import greedy, greedy_batch
from inference.distributed.layer_split import even_split
from inference.engine.model_loader import load_model
from inference.testkit.registry import build_model
from tests.support.ring import ring_hostfile, start_ranks, wait_ranks

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41, 42], [300, 2, 17, 90, 91]]
TOKENS = 6


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # Three layers: an uneven split (rank 0 two, rank 1 one).
    return build_model(tmp_path_factory.mktemp("dist") / "llama", "llama", "tiny", num_hidden_layers=3)


def _generate(model, out, ranks):
    prompts = [arg for p in PROMPTS for arg in ("--prompt", ",".join(map(str, p)))]
    argv = ["-m", "inference.distributed.generate", str(model), *prompts, "--max-tokens", str(TOKENS)]
    argv += ["--out", str(out)]
    results = wait_ranks(start_ranks(argv, ring_hostfile(out.parent / f"{out.name}.hosts", ranks), ranks))
    assert [code for code, _ in results] == [0] * ranks, results
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def test_two_ranks_generate_what_one_process_does(model, tmp_path):
    ranks = _generate(model, tmp_path / "two", 2)
    one = load_model(model, "float32").model  # the reference: this process, the whole model
    sequential = [greedy(one, p, TOKENS) for p in PROMPTS]
    assert [r["layers"] for r in ranks] == [[0, 2], [2, 3]]  # each rank ran its own layers only
    for r in ranks:
        assert r["sequential"] == sequential  # prefill in chunks, then decode
        assert r["batched"] == greedy_batch(one, PROMPTS, TOKENS)  # one left-padded batch


def test_even_split_covers_every_layer_once():
    for layers, size in [(3, 2), (7, 3), (4, 4), (28, 2)]:
        splits = [even_split(layers, size, rank) for rank in range(size)]
        assert splits[0].start == 0 and splits[-1].end == layers
        assert all(a.end == b.start for a, b in zip(splits, splits[1:]))
        assert all(s.end > s.start for s in splits)
    with pytest.raises(ValueError, match="cannot be split"):
        even_split(1, 2, 0)
