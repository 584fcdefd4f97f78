"""What ``inference.gguf`` refuses rather than import approximately: each case is a real GGUF file
of a tiny qwen2 (inference.testkit.gguf_file) read by ``reader.read``, with one metadata key or
tensor changed in memory, then given to the config and tokenizer builders."""

import copy
import json
import subprocess
import sys

import mlx.core as mx
import pytest

from inference.gguf import config, reader, tokenizer
from inference.gguf.importer import GgufImportError, import_gguf
from inference.testkit.gguf_file import write_gguf
from inference.testkit.registry import build_model


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    return reader.read(write_gguf(build_model(root / "tiny", arch="qwen2"), root / "tiny.gguf"))


def changed(gguf, **metadata):
    other = copy.copy(gguf)
    other.metadata = dict(gguf.metadata, **{k.replace("__", "."): v for k, v in metadata.items()})
    other.tensors = dict(gguf.tensors)
    return other


def test_the_file_as_written_is_accepted(gguf, tmp_path):
    assert config.build_config(gguf)["model_type"] == "qwen2"
    assert tokenizer.write_tokenizer(gguf, tmp_path)["eos"] == 2


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"qwen2__attention__head_count_kv": [2, 1]}, "qwen2.attention.head_count_kv differs between layers"),
        ({"qwen2__rope__dimension_count": 8}, "RoPE over 8 of 16 head dimensions is not supported"),
        (
            {"qwen2__rope__scaling__type": "longrope", "qwen2__rope__scaling__factor": 4.0},
            "RoPE scaling 'longrope'",
        ),
        ({"qwen2__attention__value_length": 32}, "key and value head sizes differ"),
    ],
)
def test_config_keys_that_change_the_math_are_refused(gguf, metadata, message):
    with pytest.raises(GgufImportError, match=message):
        config.build_config(changed(gguf, **metadata))


def test_rope_freqs_that_are_not_llama3_scaling_are_refused(gguf):
    other = changed(gguf)
    other.tensors["rope_freqs.weight"] = mx.full((8,), 2.0)  # one factor for every frequency: linear
    with pytest.raises(GgufImportError, match="rope_freqs\\) are not llama 3's scaling"):
        config.build_config(other)


@pytest.mark.parametrize(
    "metadata, message",
    [
        ({"tokenizer__ggml__model": "bert"}, "GGUF tokenizer model 'bert' is not supported"),
        (
            {"tokenizer__ggml__model": "llama", "tokenizer__ggml__tokens": ["<unk>", "a" * 513]},
            "a SentencePiece token of 513 characters \\(at most 512\\)",
        ),
        (
            {
                "tokenizer__ggml__model": "llama",
                "tokenizer__ggml__tokens": ["a", "b"],
                "tokenizer__ggml__scores": [0.0],
            },
            "1 token scores for 2 tokens",
        ),
        ({"tokenizer__ggml__tokens": []}, "the GGUF has no tokenizer.ggml.tokens"),
        ({"tokenizer__ggml__pre": "tekken"}, "GGUF pre-tokenizer 'tekken' is not supported"),
    ],
)
def test_tokenizers_it_cannot_write_exactly_are_refused(gguf, tmp_path, metadata, message):
    with pytest.raises(GgufImportError, match=message):
        tokenizer.write_tokenizer(changed(gguf, **metadata), tmp_path)


def test_a_sentencepiece_vocabulary_without_the_flag_gets_bos(gguf, tmp_path):
    """llama.cpp (and transformers' loader) add BOS to a SentencePiece vocabulary whose file has
    no tokenizer.ggml.add_bos_token; a byte-level one gets none."""
    for kind, expected in (("llama", True), ("gpt2", False)):
        other = changed(gguf, tokenizer__ggml__model=kind, tokenizer__ggml__bos_token_id=1)
        del other.metadata["tokenizer.ggml.add_bos_token"]
        tokenizer.write_tokenizer(other, tmp_path)
        assert json.loads((tmp_path / "tokenizer_config.json").read_text())["add_bos_token"] is expected


def test_a_sentencepiece_space_prefix_follows_the_file(gguf, tmp_path):
    """tokenizer.ggml.add_space_prefix false (llama.cpp honours it): no ``▁`` before the text."""
    from tokenizers import Tokenizer

    from inference.testkit.sentencepiece import sentencepiece_vocab

    vocab = sentencepiece_vocab()
    spm = dict(
        tokenizer__ggml__model="llama",
        tokenizer__ggml__tokens=vocab.tokens,
        tokenizer__ggml__scores=vocab.scores,
        tokenizer__ggml__token_type=vocab.types,
        tokenizer__ggml__bos_token_id=1,
    )
    for flag, prefixed in ((None, True), (False, False)):
        other = (
            changed(gguf, **spm)
            if flag is None
            else changed(gguf, **spm, tokenizer__ggml__add_space_prefix=flag)
        )
        tokenizer.write_tokenizer(other, tmp_path)
        loaded = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
        encoded = loaded.encode("the water")
        assert encoded.tokens[0].startswith("▁") is prefixed, encoded.tokens
        assert loaded.decode(encoded.ids) == "the water"


def test_bits_other_than_4_or_8_are_refused(gguf, tmp_path):
    with pytest.raises(GgufImportError, match="--quantize takes 4 or 8, not 3"):
        import_gguf(gguf.path, tmp_path / "out", quantize=3)


@pytest.mark.parametrize(
    "data",
    [
        b"GGUF\x03\x00\x00\x00" + b"\xff" * 7 + b"\x7f" + b"\x00" * 8,  # 2^63 tensors claimed
        b"GGUF\x03\x00\x00\x00" + b"\x01" + b"\x00" * 7 + b"\x01" + b"\x00" * 7,  # cut after the counts
    ],
    ids=["huge-count", "truncated"],
)
def test_a_crafted_header_is_refused_not_a_crash(tmp_path, data):
    """MLX's C reader trusts the header's counts (a crafted one segfaults it): the file is read by
    gguf-py's bounds-checked reader first. In a subprocess, so that a crash is a failure here."""
    path = tmp_path / "crafted.gguf"
    path.write_bytes(data)
    code = "\n".join(
        (
            "import sys",
            "from inference.gguf.importer import GgufImportError",
            "from inference.gguf.reader import read",
            "try:",
            "    read(sys.argv[1])",
            "except GgufImportError as exc:",
            "    print('refused:', exc)",
        )
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert "refused: crafted.gguf: not a GGUF file" in done.stdout
