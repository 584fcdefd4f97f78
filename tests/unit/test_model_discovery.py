"""Discovery of model folders: depth 1 and 2, several directories, kinds, unservable folders with
their reasons, rescans when a directory changes; memory estimates from safetensors headers."""

import json
import shutil

import pytest

from inference.pool import ModelPool
from inference.pool.discovery import discover, inspect
from inference.pool.memory import estimate, kv_bytes_per_token, parse_limit


def folder(path, config=None, files=("model.safetensors", "tokenizer.json")):
    path.mkdir(parents=True)
    if config is not None:
        (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for name in files:
        (path / name).write_bytes(b"")
    return path


LLM = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}


def test_depth_one_and_two_with_kinds_and_reasons(tmp_path, model_dir):
    shutil.copytree(model_dir("qwen2", "tiny"), tmp_path / "plain")
    shutil.copytree(model_dir("qwen2", "tiny"), tmp_path / "acme" / "chat-1b")
    folder(tmp_path / "acme" / "only-gguf", None, ("model-q4.gguf",))
    folder(tmp_path / "gguf-model", LLM, ("model.gguf", "tokenizer.json"))
    folder(tmp_path / "torch-model", LLM, ("pytorch_model.bin", "tokenizer.json"))
    folder(tmp_path / "empty-model", LLM, ("tokenizer.json",))
    folder(tmp_path / "broken", "{not json")
    folder(tmp_path / "no-type", {"architectures": ["X"]})
    folder(tmp_path / "unknown-arch", {"model_type": "no-such-arch"})
    folder(tmp_path / "no-tokenizer", LLM, ("model.safetensors",))
    folder(tmp_path / "org" / "minilm", {"model_type": "bert", "architectures": ["BertModel"]})
    folder(tmp_path / "st-embed", {"model_type": "xlm-roberta"}, ("model.safetensors", "modules.json"))
    folder(
        tmp_path / "reranker",
        {"model_type": "xlm-roberta", "architectures": ["XLMRobertaForSequenceClassification"]},
    )
    folder(tmp_path / "modern-embed", {"model_type": "modernbert", "architectures": ["ModernBertModel"]})
    folder(tmp_path / "bert-no-head", {"model_type": "bert", "architectures": ["BertModel"]})
    folder(tmp_path / "bert-slow", {"model_type": "bert"}, ("model.safetensors", "vocab.txt"))
    folder(
        tmp_path / "Qwen" / "Qwen3-Reranker-0.6B",
        {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
    )
    folder(
        tmp_path / "Qwen" / "Qwen3-Embedding-mlx",
        {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
    )
    folder(
        tmp_path / "qwen-st",
        {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]},
        ("model.safetensors", "tokenizer.json", "modules.json"),
    )
    folder(tmp_path / ".hidden", LLM)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "empty-org").mkdir()

    found = discover([tmp_path])
    servable = sorted(i for i, f in found.items() if f.servable)
    assert servable == [
        "Qwen/Qwen3-Embedding-mlx",
        "Qwen/Qwen3-Reranker-0.6B",
        "acme/chat-1b",
        "bert-no-head",
        "org/minilm",
        "plain",
        "qwen-st",
        "reranker",
    ]
    assert found["acme/chat-1b"].kind == "llm" and found["acme/chat-1b"].size_bytes > 0
    reasons = {i: f.reason for i, f in found.items() if not f.servable}
    assert "GGUF" in reasons["acme/only-gguf"] or "config.json" in reasons["acme/only-gguf"]
    assert "GGUF" in reasons["gguf-model"]
    assert ".bin" in reasons["torch-model"]
    assert "no weights" in reasons["empty-model"]
    assert "config.json" in reasons["broken"]
    assert "model_type" in reasons["no-type"]
    assert "not supported by the installed mlx-lm" in reasons["unknown-arch"]
    assert "tokenizer" in reasons["no-tokenizer"]
    kinds = {i: f.kind for i, f in found.items()}
    assert kinds["org/minilm"] == kinds["st-embed"] == kinds["qwen-st"] == "embedding"
    assert kinds["reranker"] == kinds["Qwen/Qwen3-Reranker-0.6B"] == "reranker"  # a causal LM named so
    assert kinds["Qwen/Qwen3-Embedding-mlx"] == "embedding" and kinds["plain"] == "llm"
    assert "encoder model_type 'modernbert' is not supported" in reasons["modern-embed"]
    assert "tokenizer" in reasons["st-embed"]
    assert "no tokenizer.json: embedding models need the fast tokenizer file" == reasons["bert-slow"]
    # a BertModel folder made a reranker by the setting has no classification head
    assert "ForSequenceClassification" in inspect("x", tmp_path / "bert-no-head", "reranker").reason
    assert not any(".hidden" in i or "empty-org" in i or "notes" in i for i in found)
    # a kind override (the model_type setting) wins over the rules
    assert inspect("org/minilm", tmp_path / "org" / "minilm", "reranker").kind == "reranker"


def test_several_directories_first_wins(tmp_path, model_dir):
    first, second = tmp_path / "one", tmp_path / "two"
    shutil.copytree(model_dir("qwen2", "tiny"), first / "m")
    shutil.copytree(model_dir("qwen2", "tiny"), second / "m")
    shutil.copytree(model_dir("qwen2", "tiny"), second / "other")
    found = discover([first, second, tmp_path / "missing"])
    assert found["m"].path == first / "m" and found["m"].servable
    assert found["other"].servable
    shadowed = [f for i, f in found.items() if i.startswith("m@")]
    assert len(shadowed) == 1 and "shadowed" in shadowed[0].reason


@pytest.mark.django_db
def test_pool_rescans_when_a_directory_changes(tmp_path, model_dir):
    pool = ModelPool([tmp_path / "models"], read_settings=dict)
    assert pool.ids() == ["omlx-demo"] or pool.ids() == []  # nothing found: the demo model alone
    shutil.copytree(model_dir("qwen2", "tiny"), tmp_path / "models" / "acme" / "m")
    assert pool.ids() == ["acme/m"]  # a new org folder at depth 2: seen on the next access
    shutil.copytree(model_dir("qwen2", "tiny"), tmp_path / "models" / "acme" / "n")
    assert pool.ids() == ["acme/m", "acme/n"]
    shutil.rmtree(tmp_path / "models" / "acme" / "m")
    assert pool.ids() == ["acme/n"]
    assert pool.path("acme/n") == tmp_path / "models" / "acme" / "n"
    assert pool.path("acme/m") is None


def test_estimate_reads_safetensors_headers(model_dir):
    path = model_dir("qwen2", "tiny")
    config = json.loads((path / "config.json").read_text())
    files = sorted(path.glob("*.safetensors"))
    settings = {
        "max_concurrent_requests": 2,
        "hot_cache_max_size": "1MB",
        "max_kv_tokens": 1000,
        "dtype": "float32",
    }
    est = estimate(files, config, settings)
    import mlx.core as mx

    loaded = mx.load(str(files[0]))
    assert est.weights_bytes == sum(a.size * 4 for a in loaded.values())
    per_token = kv_bytes_per_token(config, "float32")
    assert per_token == 2 * 2 * 2 * 16 * 4  # 2 (K, V) x layers x KV heads x head dim x 4 bytes
    assert est.kv_bytes == 1000 * per_token
    assert est.hot_bytes == 10**6
    half = estimate(files, config, dict(settings, dtype="bfloat16"))
    assert half.weights_bytes * 2 == est.weights_bytes
    # the KV bound: max_concurrent_requests x (context + 256) when that is below the capacity
    bounded = estimate(files, config, dict(settings, max_kv_tokens=10**7))
    assert bounded.kv_bytes == 2 * (config["max_position_embeddings"] + 256) * per_token


@pytest.mark.parametrize("arch", ["qwen2", "gemma3_text", "qwen3_5", "nemotron_h", "gpt_oss"])
def test_kv_bytes_per_token_counts_the_layers_the_engine_keeps_kv_for(model_dir, arch):
    """The estimate made before loading (config.json only) equals what the loaded model's caches
    hold per token: hybrid models' linear-attention and Mamba layers keep no KV."""
    from inference.engine.model_loader import load_model

    path = model_dir(arch=arch, preset="tiny")
    config = json.loads((path / "config.json").read_text())
    assert kv_bytes_per_token(config, "float32") == load_model(path, "float32").kv_bytes_per_token


def test_limits():
    assert parse_limit("disabled", "x") is None
    assert parse_limit("2GB", "x") == 2 * 10**9
    assert parse_limit("auto", "x", auto=5) == 5
    for bad in ("auto", "0", "lots", "-1GB"):
        with pytest.raises(ValueError):
            parse_limit(bad, "x")
