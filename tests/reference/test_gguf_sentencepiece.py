"""SentencePiece GGUFs (``tokenizer.ggml.model = llama``: older llama, mistral, gemma), imported by
``inference.gguf`` and compared with transformers' GGUF loader on the same file: a tiny random
llama and gemma3 with a real small SentencePiece vocabulary (inference.testkit.sentencepiece:
pieces and scores, byte tokens, no merges). The tokenizer omlx serves (mlx-lm's, from the
imported folder) encodes and decodes as transformers' does, spaces, digits, unicode and byte
fallback included, and the imported llama answers a chat prompt with transformers' greedy tokens.
"""

import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx_lm.tokenizer_utils import load as load_tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from inference.engine.model_loader import load_model
from inference.gguf.importer import import_gguf
from inference.testkit.gguf_file import write_gguf
from inference.testkit.registry import build_model
from inference.testkit.sentencepiece import sentencepiece_vocab

TEXTS = [
    "The people of the world find water.",
    "  two  spaces,   three and a trailing one ",
    " leading space",
    "2048 words in 3 days: 1.5x!",
    "héllo wörld, 日本語 and 🙂 go by bytes",
    "line one\nline two\n\n\ttab",
    "<s>written</s> specials",
    "",
]
FAMILIES = {
    "llama": {},
    "gemma3_text": {"head_dim": 256, "sliding_window_pattern": 6, "num_hidden_layers": 6},
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """arch -> (the GGUF file, the imported folder)."""
    root = tmp_path_factory.mktemp("spm")
    found = {}
    for arch, overrides in FAMILIES.items():
        vocab = sentencepiece_vocab(gemma=arch.startswith("gemma"))
        folder = build_model(root / "src" / arch, arch=arch, vocab_size=len(vocab.tokens), **overrides)
        source = write_gguf(folder, root / f"{arch}.gguf", sentencepiece=vocab)
        found[arch] = source, import_gguf(source, root / "models" / arch)
    return found


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_tokenizer_equals_transformers_gguf_loader(arch, imported):
    source, dest = imported[arch]
    theirs = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    ours = load_tokenizer(dest)
    for text in TEXTS:
        ids = theirs.encode(text)
        assert ours.encode(text) == ids, text
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)
    fallback = ours.convert_ids_to_tokens(ours.encode("x日本", add_special_tokens=False))
    assert fallback[-6:] == ["<0xE6>", "<0x97>", "<0xA5>", "<0xE6>", "<0x9C>", "<0xAC>"], fallback
    assert ours.encode("x")[0] == ours.bos_token_id  # llama.cpp's add_bos_token
    if arch == "gemma3_text":
        assert ours.convert_ids_to_tokens(ours.encode("a   "))[-1] == "▁▁▁"  # respelled from "   "
    settings = json.loads((dest / "tokenizer_config.json").read_text())
    assert settings["add_bos_token"] is True and settings["bos_token"] == "<s>"
    assert "[INST]" in settings["chat_template"]


def test_imported_llama_answers_as_transformers(imported):
    source, dest = imported["llama"]
    tokenizer = load_tokenizer(dest)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Where is the water?"}])
    assert prompt[0] == tokenizer.bos_token_id and prompt.count(tokenizer.bos_token_id) == 1
    model = load_model(dest, dtype="float32").model
    reference = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    ours, theirs = list(prompt), list(prompt)
    for _ in range(6):
        ours.append(int(model(mx.array([ours]))[0, -1].argmax()))
        with torch.no_grad():
            theirs.append(int(reference.eval()(torch.tensor([theirs])).logits[0, -1].argmax()))
    assert ours == theirs
    logits = np.array(model(mx.array([prompt]))[0].astype(mx.float32))
    with torch.no_grad():
        expected = reference(torch.tensor([prompt])).logits[0].numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=1e-5)
