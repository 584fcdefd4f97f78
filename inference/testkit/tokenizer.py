"""The tokenizer of every test model: a GPT-2 style byte-level BPE trained on a synthetic corpus
(``WORDS`` drawn with a seeded RNG, so the same arguments give the same tokenizer.json on every
machine), with the family's special tokens first and its chat template in tokenizer_config.json.
Needs the ``tokenizers`` package only (a dependency of mlx-lm)."""

import functools
import json
import random

from inference.testkit.base import COMMON_SPECIALS, EOS, MAX_TOKENIZER_VOCAB, PAD, special_tokens, write_json
from inference.testkit.templates import CHAT_TEMPLATES


def write_tokenizer(path, family, vocab_size, seed):
    """Write the tokenizer files with ``family``'s chat template into ``path`` (created if
    missing) and return the tokenizer's vocabulary ({token: id})."""
    specials = special_tokens(family)
    tokenizer_json = train_tokenizer(min(vocab_size, MAX_TOKENIZER_VOCAB), seed, specials)
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    write_json(path / "tokenizer_config.json", tokenizer_config(specials, CHAT_TEMPLATES[family]))
    write_json(
        path / "special_tokens_map.json",
        {
            "additional_special_tokens": list(specials[1:]),
            "eos_token": added_token(EOS),
            "pad_token": added_token(PAD),
        },
    )
    return json.loads(tokenizer_json)["model"]["vocab"]


def tokenizer_config(specials, chat_template):
    """tokenizer_config.json for a tokenizer whose first ids are ``specials``."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {**added_token(token), "special": True} for i, token in enumerate(specials)
        },
        "additional_special_tokens": list(specials[1:]),
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": PAD,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def added_token(content):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


@functools.lru_cache(maxsize=8)
def train_tokenizer(vocab_size, seed, specials=COMMON_SPECIALS):
    """Train a GPT-2 style byte-level BPE (about 0.2 s) and return its tokenizer.json text.

    The special tokens take the first ids and the 256 byte tokens come next, so any text encodes.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(specials),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    return tokenizer.to_str(pretty=True)


def _corpus(seed, paragraphs=2000):
    """Yield English-like paragraphs drawn from a fixed word list with a seeded RNG."""
    rng = random.Random(seed)
    for _ in range(paragraphs):
        sentences = []
        for _ in range(rng.randint(1, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 14))]
            if rng.random() < 0.2:
                words.insert(rng.randrange(len(words)), str(rng.randint(0, 2048)))
            if rng.random() < 0.3:
                words[rng.randrange(len(words))] += ","
            sentences.append(" ".join(words).capitalize() + rng.choice(".....?!:"))
        yield " ".join(sentences) + "\n" * rng.randint(1, 2)


WORDS = """
the of and to in is that it was for on are as with his they at be this from have or by one had
not but what all were when we there can an your which their said if do will each about how up out
them then she many some so these would other into has more her two like him see time could no make
than first been its who now people my made over did down only way find use may water long little
very after words called just where most know get through back much before go good new write our
used me man too any day same right look think also around another came come work three must
because does part even place well such here take why help put different away again off went old
number great tell men say small every found still between name should home big give air line set
own under read last never us left end along while might next sound below saw something thought
both few those always show large often together asked house world going want school important
until form food keep children feet land side without boy once animal life enough took four head
above kind began almost live page got earth need far hand high year mother light country father
let night picture being study second soon story since white ever paper hard near sentence better
best across during today however sure knew try told young sun thing whole hear example heard
several change answer room sea against top turned learn point city play toward five himself usually
money seen car morning river model cache token server memory block prefix request stream layer
system user assistant
""".split()
