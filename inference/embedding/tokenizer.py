"""An encoder folder's tokenizer, read from its ``tokenizer.json`` with the Rust ``tokenizers``
library (the file transformers' fast tokenizers load), giving what ``EncoderModel`` uses.

Texts are encoded whole: the file's own truncation and padding settings are switched off, as
transformers does for a call without ``truncation=`` or ``padding=``; the engine pads batches
itself and rejects sequences over the model's limit.

The special tokens that tokenizer_config.json (or, without its ``added_tokens_decoder``,
special_tokens_map.json) names are made special added tokens, unnormalized, as transformers'
loader does: a tokenizer.json that lists none (the testkit's WordPiece) still reads a "[SEP]"
typed in a text as the separator, not as "[", "sep", "]".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from tokenizers import AddedToken, Tokenizer

# transformers' named special tokens; any other ``*_token`` key of the config is one too.
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_TOKEN_FIELDS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


class EncoderTokenizer:
    """One folder's ``tokenizers.Tokenizer`` with truncation and padding off, and the
    ``model_max_length`` of its tokenizer_config.json (None when absent)."""

    def __init__(self, tokenizer: Tokenizer, model_max_length: Optional[int] = None):
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.model_max_length = model_max_length

    @classmethod
    def from_folder(cls, path) -> "EncoderTokenizer":
        """ValueError when the folder has no tokenizer.json (a slow tokenizer's files only)."""
        path = Path(path)
        file = path / "tokenizer.json"
        if not file.is_file():
            raise ValueError(
                "no tokenizer.json: omlx needs the fast tokenizer file (tokenizer.json); "
                "a folder with a slow tokenizer's files only (vocab.txt, sentencepiece.bpe.model...) "
                "can be converted by saving it with transformers' AutoTokenizer"
            )
        tokenizer = Tokenizer.from_file(str(file))
        config = _read_json(path / "tokenizer_config.json")
        _add_declared_tokens(tokenizer, config, _read_json(path / "special_tokens_map.json"))
        tokenizer.encode_special_tokens = config.get("split_special_tokens") is True
        model_max = config.get("model_max_length")
        if not isinstance(model_max, int) or isinstance(model_max, bool):
            model_max = None
        return cls(tokenizer, model_max)

    def encode(self, texts: Sequence[str], add_special_tokens: bool = True) -> List[List[int]]:
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def encode_pairs(self, pairs: Sequence[Tuple[str, str]]) -> List[Tuple[List[int], List[int]]]:
        """(token ids, token type ids) of each (a, b) pair as one sequence, special tokens
        included, as the file's post-processor joins them."""
        encodings = self._tokenizer.encode_batch([tuple(p) for p in pairs], add_special_tokens=True)
        return [(e.ids, e.type_ids) for e in encodings]

    def token_to_id(self, token: str) -> Optional[int]:
        return self._tokenizer.token_to_id(token)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)


def _add_declared_tokens(tokenizer: Tokenizer, config: dict, special_map: dict) -> None:
    """Add the config's added tokens that tokenizer.json lacks, then (re)add every named special
    token as special, in transformers' order (its loader's ``__init__`` and ``_post_init``)."""
    present = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    entries = config.get("added_tokens_decoder") or {}
    declared = [_token(entries[i]) for i in sorted(entries, key=int) if isinstance(entries[i], dict)]
    tokenizer.add_tokens([t for t in declared if t.content not in present])
    by_content = {t.content: t for t in declared}
    named = dict(config)
    if not entries:  # transformers reads special_tokens_map.json only then (its legacy path)
        named.update(special_map)
    values = [named.get(key) for key in SPECIAL_KEYS]
    values += [v for k, v in named.items() if k.endswith("_token") and k not in SPECIAL_KEYS]
    extra = named.get("extra_special_tokens") or named.get("additional_special_tokens") or []
    values += list(extra.values()) if isinstance(extra, dict) else list(extra)
    special = []
    for value in values:
        if isinstance(value, str) and value:
            special.append(by_content.get(value) or AddedToken(value, special=True, normalized=False))
        elif isinstance(value, dict) and value.get("content"):
            special.append(_token(dict(value, special=True)))
    tokenizer.add_special_tokens(special)


def _token(entry: dict) -> AddedToken:
    return AddedToken(**{k: v for k, v in entry.items() if k in _TOKEN_FIELDS})


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
