"""What every builder of the test-model kit shares: the special tokens every family starts with,
the dtypes, the rule for which tokens may win the argmax, and the writers of config files and
safetensors weights. Needs numpy only; the builders import it, never the other way round."""

import importlib
import json
import struct

import numpy as np

from inference.testkit.templates import SPECIAL_TOKENS

COMMON_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 in every family
EOS, PAD = "<|im_end|>", "<|endoftext|>"

DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}  # safetensors dtype codes

LOGIT_STD = 16.0  # spread of the logits over the vocabulary
MAX_TOKENIZER_VOCAB = 1024  # about what the synthetic corpus supports
MAX_SHARD_BYTES = 2 * 1024**3


def special_tokens(family):
    """The family's special tokens: the common three (ids 0, 1, 2), then its own (ids 3, 4, ...)."""
    return COMMON_SPECIALS + SPECIAL_TOKENS[family]


def require_test_extra(what, modules=("torch", "transformers")):
    """Import ``modules`` or raise a one-line ImportError saying that ``what`` needs them and the
    ``[test]`` extra that installs them. The product never installs torch."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs {' and '.join(modules)}: pip install 'omlx[test]'") from e


def emitted_mask(vocab, specials):
    """Mask over the tokenizer's ids: True for the tokens allowed to win the argmax."""
    printable = set(map(chr, range(0x21, 0x7F))) | {"Ġ", "Ċ"}  # byte-level space and newline
    mask = np.zeros(len(vocab), dtype=bool)
    for token, i in vocab.items():
        mask[i] = token == EOS or (token not in specials and set(token) <= printable)
    return mask


def write_json(path, data):
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def write_weights(path, weights, dtype):
    """Write ``weights`` to model.safetensors, or to shards and an index past MAX_SHARD_BYTES."""
    for stale in [*path.glob("model*.safetensors"), path / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)
    code = DTYPES[dtype]
    shards, size = [{}], 0
    for name, array in weights:
        array = _bfloat16_bits(array) if dtype == "bfloat16" else array.astype(dtype)
        if shards[-1] and size + array.nbytes > MAX_SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = array
        size += array.nbytes
    if len(shards) == 1:
        _write_safetensors(path / "model.safetensors", shards[0], code)
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        filename = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        _write_safetensors(path / filename, shard, code)
        weight_map.update(dict.fromkeys(shard, filename))
    total = sum(array.nbytes for shard in shards for array in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_json(path / "model.safetensors.index.json", index)


def _bfloat16_bits(array):
    """Round float32 to bfloat16 (to nearest even) and return the bits as uint16: numpy has no bfloat16."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _write_safetensors(path, tensors, code):
    """Write the safetensors format: u64 header size, JSON header padded to 8 bytes, raw data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, array in tensors.items():
        header[name] = {
            "dtype": code,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        offset += array.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array).data)
