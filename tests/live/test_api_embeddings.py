"""POST /v1/embeddings and POST /v1/rerank through a live `omlx serve`: the official OpenAI SDK
(client.embeddings.create, base64 by default and float) and httpx for rerank, against
sentence-transformers / transformers on the same random weights; concurrent requests equal
single ones and share forward passes (counted in /metrics); bad input is a 400 with a message; the
models live in the pool like chat models."""

import base64
import shutil
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest

from tests.reference.test_embedding_models import DOCS, QUERY, TEXTS, cosines, qwen3_reranker_reference
from tests.support.sdk_clients import openai_client
from tests.support.server import ServerProcess

st = pytest.importorskip("sentence_transformers")

EMBEDDERS = ("bert-embedding", "qwen3-embedding")


@pytest.fixture(scope="module")
def models(tmp_path_factory, model_dir):
    root = tmp_path_factory.mktemp("encoder-models")
    for arch in ("bert_embedding", "bert_reranker", "qwen3_embedding", "qwen3_reranker"):
        shutil.copytree(model_dir(arch), root / arch.replace("_", "-"))
    shutil.copytree(model_dir("qwen2"), root / "chat")
    return root


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    # A short batch wait, so that requests sent together meet in the engine however the machine
    # schedules the server's request threads (tests of batching count forward passes).
    proc = ServerProcess(
        ["--model-dir", str(models), "--hot-cache-max-size", "1MB", "--max-batch-wait-ms", "20"],
        tmp_path_factory.mktemp("embed-home"),
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    # Not strict: the SDK asks for base64 by default and checks the undecoded body against
    # List[float] in strict mode (it fails so against any server); `strict` checks float replies.
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def strict(server):
    with openai_client(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def references(models):
    return {name: st.SentenceTransformer(str(models / name), device="cpu") for name in EMBEDDERS}


@pytest.mark.parametrize("name", EMBEDDERS)
def test_embeddings_equal_the_reference(client, strict, references, name):
    reply = client.embeddings.create(model=name, input=TEXTS)  # the SDK asks for base64 and decodes it
    got = np.array([d.embedding for d in reply.data])
    reference = references[name].encode(TEXTS)
    assert [d.index for d in reply.data] == list(range(len(TEXTS)))
    assert cosines(got, reference).min() >= 0.9999
    tokens = sum(len(ids) for ids in references[name].tokenizer(TEXTS)["input_ids"])
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens
    assert reply.model == name and reply.object == "list"

    floats = strict.embeddings.create(model=name, input=TEXTS, encoding_format="float")
    assert np.allclose(np.array([d.embedding for d in floats.data]), got, atol=1e-6)
    single = client.embeddings.create(model=name, input=TEXTS[2], encoding_format="float")
    assert len(single.data) == 1 and np.allclose(single.data[0].embedding, got[2], atol=1e-5)


def test_token_ids_dimensions_and_raw_base64(server, client, references):
    ids = references["bert-embedding"].tokenizer(TEXTS[:2])["input_ids"]
    by_text = np.array(
        [
            d.embedding
            for d in client.embeddings.create(
                model="bert-embedding", input=TEXTS[:2], encoding_format="float"
            ).data
        ]
    )
    by_ids = client.embeddings.create(model="bert-embedding", input=ids, encoding_format="float")
    assert np.allclose(np.array([d.embedding for d in by_ids.data]), by_text, atol=1e-5)
    one = client.embeddings.create(model="bert-embedding", input=ids[0], encoding_format="float")
    assert np.allclose(one.data[0].embedding, by_text[0], atol=1e-5)

    short = client.embeddings.create(
        model="bert-embedding", input=TEXTS[:2], dimensions=16, encoding_format="float"
    )
    cut = by_text[:, :16] / np.linalg.norm(by_text[:, :16], axis=-1, keepdims=True)
    assert np.allclose(np.array([d.embedding for d in short.data]), cut, atol=1e-5)

    raw = httpx.post(
        server.url + "/v1/embeddings",
        json={"model": "bert-embedding", "input": TEXTS[:2], "encoding_format": "base64"},
        timeout=60,
    ).json()
    decoded = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw["data"]])
    assert np.allclose(decoded, by_text, atol=1e-6)


def forward_passes(server, name: str) -> tuple:
    """(forward passes, sequences) the server's /metrics counts for ``name`` so far."""
    counts = {}
    for line in httpx.get(server.url + "/metrics", timeout=60).text.splitlines():
        for series in ("forward_passes", "sequences"):
            if line.startswith(f'omlx_embedding_{series}_total{{model="{name}"}}'):
                counts[series] = float(line.split()[-1])
    return counts.get("forward_passes", 0.0), counts.get("sequences", 0.0)


def together(calls):
    """Every call of ``calls`` at once (one thread each); their results, in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


@pytest.mark.parametrize("name", EMBEDDERS)
def test_concurrent_requests_equal_single_ones(server, client, name):
    """32 requests at once, texts of different lengths: each gets what it gets alone, and the
    server ran them in fewer forward passes than requests (they were batched together)."""
    texts = [f"{TEXTS[i % len(TEXTS)]} number {i}" + " again" * (i % 5) for i in range(32)]

    def embed(text):
        return np.array(
            client.embeddings.create(model=name, input=text, encoding_format="float").data[0].embedding
        )

    alone = [embed(t) for t in texts]
    before = forward_passes(server, name)
    at_once = together([lambda t=t: embed(t) for t in texts])
    after = forward_passes(server, name)
    for got, want in zip(at_once, alone):
        assert np.allclose(got, want, atol=1e-5)
    passes, sequences = after[0] - before[0], after[1] - before[1]
    assert sequences == 32 and passes < 32, (passes, sequences)


@pytest.mark.parametrize("name", ("bert-reranker", "qwen3-reranker"))
def test_concurrent_reranks_equal_single_ones(server, name):
    """16 rerank requests at once (different queries and document counts): the same scores as
    each alone, in fewer forward passes than requests."""
    bodies = [
        dict(
            model=name, query=f"{QUERY} {i}" + " please" * (i % 3), documents=DOCS[: 2 + i % (len(DOCS) - 1)]
        )
        for i in range(16)
    ]

    def scores(body):
        reply = rerank(server, **body)
        assert reply.status_code == 200, reply.text
        return {r["index"]: r["relevance_score"] for r in reply.json()["results"]}

    alone = [scores(b) for b in bodies]
    before = forward_passes(server, name)
    at_once = together([lambda b=b: scores(b) for b in bodies])
    after = forward_passes(server, name)
    for got, want in zip(at_once, alone):
        assert got.keys() == want.keys()
        assert np.allclose([got[i] for i in want], [want[i] for i in want], atol=1e-5)
    passes, sequences = after[0] - before[0], after[1] - before[1]
    assert sequences == sum(len(b["documents"]) for b in bodies) and passes < 16, (passes, sequences)


def rerank(server, **body):
    return httpx.post(server.url + "/v1/rerank", json=body, timeout=120)


def test_cross_encoder_rerank_equals_the_reference(server, models):
    reference = st.CrossEncoder(str(models / "bert-reranker"), device="cpu").predict(
        [(QUERY, d) for d in DOCS]
    )
    reply = rerank(server, model="bert-reranker", query=QUERY, documents=DOCS)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert [r["index"] for r in results] == list(np.argsort(-reference, kind="stable"))
    assert np.allclose([r["relevance_score"] for r in results], np.sort(reference)[::-1], atol=1e-5)
    assert "document" not in results[0] and reply.json()["usage"]["total_tokens"] > 0

    top = rerank(
        server,
        model="bert-reranker",
        query=QUERY,
        documents=[{"text": d} for d in DOCS],
        top_n=2,
        return_documents=True,
    ).json()["results"]
    assert [r["index"] for r in top] == [r["index"] for r in results[:2]]
    assert [r["document"]["text"] for r in top] == [DOCS[r["index"]] for r in top]


def test_llm_rerank_equals_the_reference(server, models):
    reference = qwen3_reranker_reference(models / "qwen3-reranker", QUERY, DOCS)
    reply = rerank(server, model="qwen3-reranker", query=QUERY, documents=DOCS)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert [r["index"] for r in results] == list(np.argsort(-reference, kind="stable"))
    assert np.allclose([r["relevance_score"] for r in results], np.sort(reference)[::-1], atol=1e-5)


def test_bad_input_is_a_400_with_a_message(server, client):
    cases = [
        (dict(model="bert-embedding", input=""), "input[0]: is empty"),
        (dict(model="bert-embedding", input=[]), "input: must be a non-empty"),
        (dict(model="bert-embedding", input=["ok", 3]), "input[1]"),
        (dict(model="bert-embedding", input="word " * 600), "the model takes at most 512"),
        (dict(model="bert-embedding", input=[[5, 10**6]]), "outside the vocabulary"),
        (dict(model="bert-embedding", input="hi", encoding_format="int8"), "encoding_format"),
        (dict(model="bert-embedding", input="hi", dimensions=4096), "more than the model's 64"),
        (dict(model="bert-embedding", input="hi", dimensions=0), "dimensions"),
        (dict(model="chat", input="hi"), "is a chat (text generation) model"),
        (dict(model="bert-reranker", input="hi"), "is a reranker model"),
    ]
    for body, message in cases:
        reply = httpx.post(server.url + "/v1/embeddings", json=body, timeout=60)
        assert reply.status_code == 400, (body, reply.text)
        assert message in reply.json()["error"]["message"], (body, reply.text)
    with pytest.raises(openai.BadRequestError, match="is a chat"):
        client.embeddings.create(model="chat", input="hello")
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="nope", input="hello")

    rerank_cases = [
        (dict(model="bert-reranker", query="q", documents=[]), "documents: must not be empty"),
        (dict(model="bert-reranker", query="", documents=["a"]), "query"),
        (dict(model="bert-reranker", query="q", documents=["a"], top_n=0), "top_n"),
        (dict(model="bert-reranker", query="q", documents=["a", "word " * 600]), "documents[1]"),
        (dict(model="bert-embedding", query="q", documents=["a"]), "is an embedding model"),
        (dict(model="bert-reranker", query="q", documents=[{"txt": "a"}]), "documents"),
    ]
    for body, message in rerank_cases:
        reply = rerank(server, **body)
        assert reply.status_code == 400, (body, reply.text)
        assert message in reply.json()["error"]["message"], (body, reply.text)

    with pytest.raises(openai.BadRequestError, match="embedding model"):  # and no text from it
        client.chat.completions.create(model="bert-embedding", messages=[{"role": "user", "content": "hi"}])


def test_the_pool_serves_them_like_chat_models(server, client):
    ids = sorted(m.id for m in client.models.list().data)
    assert ids == ["bert-embedding", "bert-reranker", "chat", "qwen3-embedding", "qwen3-reranker"]
    rows = {r["id"]: r for r in httpx.get(server.url + "/v1/models/status").json()["data"]}
    assert rows["qwen3-reranker"]["type"] == "reranker" and rows["bert-embedding"]["type"] == "embedding"
    assert rows["bert-embedding"]["memory_estimate"]["weights_bytes"] > 0
    url = server.url + "/v1/models/bert-embedding"
    assert httpx.post(url + "/load", timeout=120).json()["loaded"] is True
    assert httpx.post(url + "/unload", timeout=120).json()["loaded"] is False
    reply = client.embeddings.create(model="bert-embedding", input="loaded again on demand")
    assert len(reply.data[0].embedding) == 64
