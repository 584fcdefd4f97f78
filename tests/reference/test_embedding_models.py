"""Embedding and reranker models in MLX against independent references on the same random
weights: sentence-transformers (its own pooling and normalisation, read from the folder) for
the embedders and the BERT cross-encoder, transformers with Qwen3-Reranker's published scoring
for the LLM reranker. And the batching engine: concurrent jobs coalesced into shared forward
passes give each job exactly its own rows."""

import threading

import numpy as np
import pytest

from inference.embedding.encoder_model import (
    DEFAULT_RERANK_INSTRUCTION,
    QWEN3_RERANK_PREFIX,
    QWEN3_RERANK_SUFFIX,
    load_encoder,
)
from inference.embedding.engine import EncoderEngine
from inference.pool.discovery import discover

pytest.importorskip("sentence_transformers")

TEXTS = [
    "The cat sat on the mat.",
    "Short",
    "A much longer sentence about the river, the mountain and the old stone bridge that crosses it.",
    "Numbers like 42 and 1999 appear here too?",
    "the cat sat on the mat",
]
QUERY = "where did the cat sit"
DOCS = [
    "the cat sat on the mat",
    "a river flows under the bridge",
    "the mountain is old and tall",
    "cats like to sit on mats",
    "numbers such as 42",
    "short",
]


def cosines(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, model_dir):
    """The four test models, under ids that discovery classifies as the Hub's folders are."""
    import shutil

    root = tmp_path_factory.mktemp("encoders")
    for arch in ("bert_embedding", "bert_reranker", "qwen3_embedding", "qwen3_reranker"):
        shutil.copytree(model_dir(arch), root / arch.replace("_", "-"))
    return root


def test_discovery_serves_each_kind(folders, model_dir):
    import shutil

    shutil.copytree(model_dir("qwen3"), folders / "chat")
    found = discover([folders])
    kinds = {i: (f.kind, f.reason) for i, f in found.items()}
    assert kinds == {
        "bert-embedding": ("embedding", None),
        "bert-reranker": ("reranker", None),
        "qwen3-embedding": ("embedding", None),
        "qwen3-reranker": ("reranker", None),
        "chat": ("llm", None),
    }
    shutil.rmtree(folders / "chat")


@pytest.mark.parametrize("name", ["bert-embedding", "qwen3-embedding"])
def test_embeddings_equal_sentence_transformers(folders, name):
    from sentence_transformers import SentenceTransformer

    model = load_encoder(folders / name, "embedding", "float32")
    ours = model.run(model.tokenize(TEXTS))
    reference = SentenceTransformer(str(folders / name), device="cpu").encode(TEXTS)
    assert ours.shape == reference.shape
    assert cosines(ours, reference).min() >= 0.9999
    assert np.allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)  # normalised like the reference
    # the texts are told apart (the comparison above is not between near-constant vectors)
    assert cosines(ours[0], ours[2]) < 0.99


def test_bert_cross_encoder_scores_equal_sentence_transformers(folders):
    from sentence_transformers import CrossEncoder

    model = load_encoder(folders / "bert-reranker", "reranker", "float32")
    ours = model.run(model.tokenize_pairs(QUERY, DOCS))
    reference = CrossEncoder(str(folders / "bert-reranker"), device="cpu").predict([(QUERY, d) for d in DOCS])
    assert np.allclose(ours, reference, atol=1e-5)
    assert list(np.argsort(-ours)) == list(np.argsort(-reference))
    assert np.ptp(reference) > 1e-3  # the scores differ, so the order means something


def qwen3_reranker_reference(path, query, docs):
    """Qwen3-Reranker's model-card scoring, in transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    prefix = tokenizer.encode(QWEN3_RERANK_PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(QWEN3_RERANK_SUFFIX, add_special_tokens=False)
    scores = []
    for doc in docs:
        body = f"<Instruct>: {DEFAULT_RERANK_INSTRUCTION}\n<Query>: {query}\n<Document>: {doc}"
        ids = prefix + tokenizer.encode(body, add_special_tokens=False) + suffix
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]
        pair = torch.log_softmax(torch.stack([logits[no], logits[yes]]), dim=0)
        scores.append(float(pair[1].exp()))
    return np.array(scores)


def test_qwen3_reranker_scores_equal_transformers(folders):
    model = load_encoder(folders / "qwen3-reranker", "reranker", "float32")
    ours = model.run(model.tokenize_pairs(QUERY, DOCS))
    reference = qwen3_reranker_reference(folders / "qwen3-reranker", QUERY, DOCS)
    assert np.allclose(ours, reference, atol=1e-5)
    assert list(np.argsort(-ours)) == list(np.argsort(-reference))
    assert np.ptp(reference) > 1e-3


@pytest.mark.parametrize(
    "name,kind",
    [
        ("bert-embedding", "embedding"),
        ("qwen3-embedding", "embedding"),
        ("bert-reranker", "reranker"),
        ("qwen3-reranker", "reranker"),
    ],
)
def test_concurrent_jobs_are_batched_and_get_their_own_rows(folders, name, kind):
    engine = EncoderEngine(folders / name, kind, max_batch_wait_ms=200, dtype="float32")
    try:
        model = engine.loaded
        jobs = (
            [model.tokenize([t]) for t in TEXTS] + [model.tokenize(TEXTS[::-1])]
            if kind == "embedding"
            else [model.tokenize_pairs(QUERY, [d]) for d in DOCS] + [model.tokenize_pairs(QUERY, DOCS[::-1])]
        )
        alone = [model.run(seqs) for seqs in jobs]  # one job per forward pass
        results = [None] * len(jobs)
        start = threading.Barrier(len(jobs))

        def client(i):
            start.wait()
            results[i] = engine.submit(jobs[i]).result(timeout=120)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for got, want in zip(results, alone):
            assert got.shape == want.shape
            assert np.allclose(got, want, atol=1e-5)
        assert engine.batches < len(jobs)  # coalesced: fewer forward passes than jobs
        assert engine.num_active() == 0 and engine.idle_since() is not None
    finally:
        engine.close()


def test_a_cancelled_job_is_dropped_and_the_engine_goes_on(folders):
    engine = EncoderEngine(folders / "bert-embedding", "embedding", max_batch_wait_ms=300, dtype="float32")
    try:
        seqs = engine.loaded.tokenize(TEXTS)
        dropped = engine.submit(seqs)
        assert dropped.cancel()  # still queued (the engine waits 300 ms for company)
        kept = engine.submit(seqs).result(timeout=60)
        assert kept.shape == (len(TEXTS), engine.loaded.dim)
        assert engine.num_active() == 0
    finally:
        engine.close()


def test_the_batch_wait_gathers_jobs_and_ends_once_a_batch_is_full(folders):
    """max_batch_wait_ms: jobs sent one after the other within the window share one forward pass;
    once MAX_BATCH_ROWS sequences wait, the engine runs them without waiting out the window."""
    from inference.embedding.engine import MAX_BATCH_ROWS

    engine = EncoderEngine(
        folders / "bert-embedding",
        "embedding",
        max_batch_wait_ms=60_000,
        dtype="float32",
        max_batch_tokens=10**6,
    )  # rows, not padded tokens, bound the batch here
    try:
        seqs = engine.loaded.tokenize(TEXTS)
        first = engine.submit(seqs[:1])
        rest = [engine.submit([seq]) for seq in seqs[1:]]
        full = engine.submit(seqs[:1] * (MAX_BATCH_ROWS - len(seqs)))  # the queue is now full
        rows = [f.result(timeout=30)[0] for f in [first] + rest]  # 30 s: far less than the window
        assert full.result(timeout=30).shape[0] == MAX_BATCH_ROWS - len(seqs)
        assert np.allclose(np.stack(rows), engine.loaded.run(seqs), atol=1e-5)
        assert engine.batches == 1 and engine.rows == MAX_BATCH_ROWS
    finally:
        engine.close()


@pytest.mark.parametrize("arch", ["bert_embedding", "bert_reranker", "qwen3_embedding", "qwen3_reranker"])
def test_build_model_cli_writes_the_same_bytes_as_the_factory(tmp_path, model_dir, arch):
    import subprocess
    import sys

    out = tmp_path / arch
    done = subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "build-model", str(out), "--arch", arch],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    built = model_dir(arch)
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for name in files:
        assert (out / name).read_bytes() == (built / name).read_bytes(), name


def test_call_runs_on_the_engine_thread_and_raises_what_fn_raised(folders, model_dir):
    """The thread base both engines share (inference.engine.engine_thread): ``call`` runs on the
    engine's own thread, returns the result, raises the function's exception in the caller, and
    the engine carries on; after ``close`` it refuses work."""
    import threading

    from inference.engine import Engine

    engines = [
        EncoderEngine(folders / "bert-embedding", "embedding", dtype="float32"),
        Engine(model_dir(), prefix_cache=False),
    ]
    for engine in engines:
        try:
            assert engine.call(lambda e: threading.current_thread().name) == engine._thread.name
            with pytest.raises(ZeroDivisionError):
                engine.call(lambda e: 1 / 0)
            assert engine.call(lambda e: e is engine) is True
            assert engine.num_active() == 0 and engine.idle_since() is not None
        finally:
            engine.close()
        with pytest.raises(RuntimeError, match="closed"):
            engine.call(lambda e: None)
