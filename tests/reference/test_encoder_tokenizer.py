"""The encoders' tokenizer (``inference.embedding.tokenizer``: tokenizer.json read with the
``tokenizers`` library) against transformers' ``AutoTokenizer`` on the same folders, token for
token: every encoder family the testkit builds, and a RoBERTa-style folder (SentencePiece
Unigram, ``<s> A </s></s> B </s>``, a left-stripping ``<mask>``) whose tokenizer.json asks for
truncation and padding, which neither applies to a plain call."""

import json
import shutil

import pytest

from inference.embedding.encoder_model import EncoderLoadError, load_encoder
from inference.embedding.tokenizer import EncoderTokenizer

transformers = pytest.importorskip("transformers")

FAMILIES = ("bert_embedding", "bert_reranker", "qwen3_embedding", "qwen3_reranker", "roberta")
TEXTS = [
    "The cat sat on the mat.",
    "Short",
    "",
    "  spaces   inside\tand\nnewlines ",
    "Numbers like 42 and 1999? UPPER lower MiXeD",
    "yesterday yes no: héllo, naïve café, 日本語 and an emoji 🙂",
    "typed specials: [CLS] a [SEP] b [MASK] <|im_end|> <|endoftext|> <s> </s> where did the cat <mask>",
    "A much longer sentence about the river, the mountain and the old stone bridge that crosses it. " * 8,
]
QUERY = "where did the cat sit"


def write_roberta(path):
    """A small XLM-RoBERTa-style folder: tokenizer.json and tokenizer_config.json only."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    words = "the cat sat on mat where did sit river bridge old stone".split()
    pieces = [(t, 0.0) for t in specials] + [("▁" + w, -1.0 - i) for i, w in enumerate(words)]
    pieces += [(c, -20.0) for c in "abcdefghijklmnopqrstuvwxyz.,?!:0123456789"] + [
        ("▁", -5.0),
        ("<mask>", 0.0),
    ]
    tokenizer = Tokenizer(models.Unigram(pieces, unk_id=3))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.add_special_tokens(specials)
    tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    tokenizer.enable_truncation(8)  # the file's settings; a plain call applies neither
    tokenizer.enable_padding(length=64)
    path.mkdir(parents=True)
    tokenizer.save(str(path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 512,
        "added_tokens_decoder": {
            str(i): t.__getstate__() for i, t in tokenizer.get_added_tokens_decoder().items()
        },
    }
    names = (
        ("bos", "<s>"),
        ("eos", "</s>"),
        ("sep", "</s>"),
        ("cls", "<s>"),
        ("unk", "<unk>"),
        ("pad", "<pad>"),
    )
    config.update({f"{name}_token": token for name, token in names + (("mask", "<mask>"),)})
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def folder(model_dir, tmp_path_factory):
    def get(family):
        if family == "roberta":
            return write_roberta(tmp_path_factory.mktemp("roberta") / "tok")
        return model_dir(family)

    return get


@pytest.mark.parametrize("family", FAMILIES)
def test_ids_and_type_ids_equal_auto_tokenizer(folder, family):
    path = folder(family)
    ours = EncoderTokenizer.from_folder(path)
    reference = transformers.AutoTokenizer.from_pretrained(str(path))
    for special in (True, False):
        assert (
            ours.encode(TEXTS, add_special_tokens=special)
            == (reference(TEXTS, add_special_tokens=special)["input_ids"])
        ), f"add_special_tokens={special}"
    pairs = ours.encode_pairs([(QUERY, text) for text in TEXTS])
    expected = reference([QUERY] * len(TEXTS), TEXTS, return_token_type_ids=True)
    assert [ids for ids, _ in pairs] == expected["input_ids"]
    assert [types for _, types in pairs] == expected["token_type_ids"]
    assert len(ours) == len(reference)
    assert ours.model_max_length == reference.model_max_length
    for word in ("yes", "no", "[SEP]", "<|endoftext|>", "<mask>", "not-a-token"):
        expected_id = reference.convert_tokens_to_ids(word)
        present = expected_id is not None and expected_id != reference.unk_token_id
        assert ours.token_to_id(word) == (expected_id if present else None), word


def test_the_special_tokens_are_really_there(folder):
    """The comparison above is not vacuous: specials are added, and a typed one is one token."""
    bert = EncoderTokenizer.from_folder(folder("bert_embedding"))
    cls, sep = bert.token_to_id("[CLS]"), bert.token_to_id("[SEP]")
    ids = bert.encode(["a [SEP] b"])[0]
    assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2
    qwen = EncoderTokenizer.from_folder(folder("qwen3_embedding"))
    end = qwen.token_to_id("<|endoftext|>")
    assert (
        qwen.encode(["hello"])[0][-1] == end
        and qwen.encode(["hello"], add_special_tokens=False)[0][-1] != end
    )
    roberta = EncoderTokenizer.from_folder(folder("roberta"))
    assert len(roberta.encode([TEXTS[-1]])[0]) > 64  # the file's truncation (8) and padding (64) are off


def test_a_folder_without_tokenizer_json_is_refused_with_the_reason(model_dir, tmp_path):
    path = tmp_path / "no-fast-tokenizer"
    shutil.copytree(model_dir("qwen3_embedding"), path)
    (path / "tokenizer.json").unlink()
    with pytest.raises(EncoderLoadError, match=r"fast tokenizer file \(tokenizer\.json\)"):
        load_encoder(path, "embedding")
