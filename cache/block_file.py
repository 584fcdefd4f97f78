"""One KV block as a safetensors file: its name, its metadata, and the checks of its header.

Layout under the cold-cache root::

    <fingerprint.hex>/<key_hex[:2]>/<key_hex>.safetensors        a block
    <fingerprint.hex>/<key_hex[:2]>/<key_hex>.<host>.<pid>-<n>.tmp a write in progress (or a
                                                               crash's leftover); <host>: a tag of
                                                               the writer's host name
    <fingerprint.hex>/kids/<parent_hex[:2]>/<parent_hex>/<key_hex>  an empty marker: the block
                                                               exists (cache/cold_kids.py)
    <fingerprint.hex>/model.json                                   which model folder wrote the blocks
                                                                   (for people: `omlx cache`;
                                                                   never read by lookups)

Tensors ``l{i}.k`` and ``l{i}.v`` hold layer i's keys and values, each [1, kv_heads, tokens,
head_dim]. The header's ``__metadata__`` (strings only) names the format version, the model
fingerprint, the block's key and parent, its token ids (base64 of little-endian uint32), dtype and
layer count. A model whose layers are not all full attention (cache/layout.py) adds ``kinds``,
one tag per layer: ``f`` (keys and values of every token), ``s<W>`` (keys and values of the last
min(tokens, W) tokens) or ``r<N>`` (N state arrays ``l{i}.s0`` ... ``l{i}.s<N-1>``, each
[1, ...], in their own dtype). Without ``kinds`` every layer is ``f``: the first format, unchanged.
A block of a model run with quantized KV adds ``kv`` (``q<bits>g<group>``, cache/layout.py): its
attention layers (``f`` and ``s<W>``) hold six tensors, ``l{i}.k`` and ``l{i}.v`` the packed uint32 data and
``l{i}.ks``, ``l{i}.kb``, ``l{i}.vs``, ``l{i}.vb`` their scales and biases in ``dtype``, each
[1, kv_heads, tokens, columns], the columns agreeing with the bits and the group size.
A header is valid only if all of that agrees with the file's name and place, the key is
``block_key(parent, tokens)``, and the tensors tile the data exactly to the end of the file, so
a truncated, foreign, misplaced or corrupt file is caught without reading its tensors.

Nothing here imports mlx: GC and reconciliation read headers only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import struct
import time
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .block_key import FORMAT_VERSION, KEY_BYTES, block_key
from .layout import FULL, STATE, parse_kv, parse_tags

SUFFIX = ".safetensors"
TMP_SUFFIX = ".tmp"
MODEL_INFO = "model.json"
MAGIC = "omlx-kv-block"
MAX_HEADER_BYTES = 16 << 20

FINGERPRINT_DIR = re.compile(r"^[0-9a-f]{32}$")
SHARD_DIR = re.compile(r"^[0-9a-f]{2}$")
BLOCK_NAME = re.compile(r"^([0-9a-f]{64})\.safetensors$")
# group 2: the writer's host tag (absent in names written before shared folders), group 3: its pid
TMP_NAME = re.compile(r"^([0-9a-f]{64})\.(?:([0-9a-f]{8})\.)?(\d+)-\d+\.tmp$")
# The host tag of this machine's temp files: writers on several machines may share one folder (a
# network file system), and a pid says nothing about another machine's processes.
HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
# Another machine's temp file is a crash's leftover once this old (a write takes milliseconds).
FOREIGN_TMP_SECONDS = 3600


def tmp_name(key_hex: str, n: int) -> str:
    return f"{key_hex}.{HOST_TAG}.{os.getpid()}-{n}{TMP_SUFFIX}"


def tmp_writer_gone(match: "re.Match", path) -> bool:
    """Whether the writer of the temp file ``path`` (``match``: of TMP_NAME) has gone: a process of
    this machine that no longer runs, or a file of another machine older than FOREIGN_TMP_SECONDS."""
    from . import durable

    host = match.group(2)
    if host is None or host == HOST_TAG:
        return not durable.pid_alive(int(match.group(3)))
    try:
        return time.time() - os.stat(path).st_mtime > FOREIGN_TMP_SECONDS
    except OSError:
        return False


# safetensors dtype code -> bytes per element, and the mlx dtype names the metadata uses.
_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
}
DTYPE_CODES = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float64": "F64",
    "int8": "I8",
    "uint8": "U8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
}


class InvalidBlockFile(ValueError):
    """The file is not a valid block file for the place it was found in."""


@dataclass(frozen=True)
class BlockHeader:
    """What a valid block file's header says about it."""

    key: bytes
    parent: bytes
    token_ids: Tuple[int, ...]
    dtype: str  # mlx dtype name, e.g. "float32"
    num_layers: int
    kinds: Tuple[Tuple[str, int], ...]  # (kind, window or state array count) per layer
    tensor_bytes: int  # sum of the tensors' bytes (what the block takes in RAM)
    file_bytes: int
    mtime: float
    kv: str = ""  # the full-attention layers' KV format: "" or q<bits>g<group>


def relative_path(fingerprint_hex: str, key_hex: str) -> str:
    """The file's path relative to the cold-cache root (as stored in CacheBlock.file)."""
    return f"{fingerprint_hex}/{key_hex[:2]}/{key_hex}{SUFFIX}"


def encode_tokens(token_ids) -> str:
    return base64.b64encode(struct.pack(f"<{len(token_ids)}I", *token_ids)).decode("ascii")


def decode_tokens(text: str) -> Tuple[int, ...]:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) % 4:
        raise InvalidBlockFile("token bytes are not a multiple of 4")
    return struct.unpack(f"<{len(raw) // 4}I", raw)


QUANTIZED_SUFFIXES = ("k", "ks", "kb", "v", "vs", "vb")  # data, scales, biases of keys, then values


def tensor_names(kinds, kv: str = "") -> list:
    """The tensor names of a block file, per layer in order, for (kind, count) pairs and the
    KV format ``kv`` (quantized: six tensors per attention layer)."""
    names = []
    for i, (kind, count) in enumerate(kinds):
        if kind == STATE:
            names.append([f"l{i}.s{j}" for j in range(count)])
        elif kv:
            names.append([f"l{i}.{suffix}" for suffix in QUANTIZED_SUFFIXES])
        else:
            names.append([f"l{i}.k", f"l{i}.v"])
    return names


def metadata(
    fingerprint_hex: str,
    key: bytes,
    parent: bytes,
    token_ids,
    dtype: str,
    num_layers: int,
    kinds: str = "",
    kv: str = "",
) -> Dict[str, str]:
    """The header metadata; ``kinds`` is ``CacheLayout.tags`` (empty for full attention only),
    ``kv`` is ``CacheLayout.kv`` (empty for KV in the model's dtype)."""
    extra = {"kinds": kinds} if kinds else {}
    if kv:
        extra["kv"] = kv
    return {
        **extra,
        "omlx": MAGIC,
        "format": str(FORMAT_VERSION),
        "fingerprint": fingerprint_hex,
        "key": key.hex(),
        "parent": parent.hex(),
        "tokens": encode_tokens(token_ids),
        "dtype": dtype,
        "layers": str(num_layers),
    }


def read_raw_header(path) -> Tuple[dict, int, os.stat_result]:
    """The parsed JSON header, the number of bytes after it, and the file's stat.
    Raises OSError or InvalidBlockFile."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        head = os.read(fd, 4096)  # one read holds the whole header of a typical block
        if len(head) < 8:
            raise InvalidBlockFile("shorter than a safetensors header")
        (n,) = struct.unpack_from("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > st.st_size:
            raise InvalidBlockFile(f"header length {n} does not fit a file of {st.st_size} bytes")
        while len(head) < 8 + n:
            more = os.read(fd, 8 + n - len(head))
            if not more:
                raise InvalidBlockFile("file ended inside its header")
            head += more
    finally:
        os.close(fd)
    try:
        header = json.loads(head[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidBlockFile(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise InvalidBlockFile("header is not a JSON object")
    return header, st.st_size - 8 - n, st


def read_header(
    path, fingerprint_hex: str, key_hex: str, kinds: Optional[str] = None, kv: Optional[str] = None
) -> BlockHeader:
    """Read and check the header of the block file at ``path``, which is expected to hold the
    block ``key_hex`` of model ``fingerprint_hex`` (and, when given, layer kinds ``kinds`` and KV
    format ``kv``). Raises OSError or InvalidBlockFile."""
    header, data_bytes, st = read_raw_header(path)
    try:
        return check_header(header, data_bytes, st, fingerprint_hex, key_hex, kinds, kv)
    except InvalidBlockFile:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as e:  # values of unexpected types
        raise InvalidBlockFile(f"malformed header: {e!r}") from None


def check_header(
    header: dict,
    data_bytes: int,
    st: os.stat_result,
    fingerprint_hex: str,
    key_hex: str,
    expected_kinds: Optional[str] = None,
    expected_kv: Optional[str] = None,
) -> BlockHeader:
    meta = header.get("__metadata__")
    if not isinstance(meta, dict):
        raise InvalidBlockFile("no __metadata__")
    if meta.get("omlx") != MAGIC:
        raise InvalidBlockFile("not an omlx block file")
    if meta.get("format") != str(FORMAT_VERSION):
        raise InvalidBlockFile(f"format version {meta.get('format')!r}, expected {FORMAT_VERSION}")
    if meta.get("fingerprint") != fingerprint_hex:
        raise InvalidBlockFile("written for another model fingerprint")
    if meta.get("key") != key_hex:
        raise InvalidBlockFile("metadata names another key than the file name")
    try:
        key, parent = bytes.fromhex(meta["key"]), bytes.fromhex(meta["parent"])
        tokens = decode_tokens(meta["tokens"])
        num_layers = int(meta["layers"])
        dtype = meta["dtype"]
    except (KeyError, ValueError, TypeError, struct.error) as e:
        raise InvalidBlockFile(f"bad metadata: {e}") from None
    if len(parent) != KEY_BYTES or not tokens or num_layers < 1:
        raise InvalidBlockFile("bad parent, empty tokens or no layers")
    if block_key(parent, tokens) != key:
        raise InvalidBlockFile("key is not the hash of parent and tokens")
    code = DTYPE_CODES.get(dtype)
    if code is None:
        raise InvalidBlockFile(f"unknown dtype {dtype!r}")
    tags = meta.get("kinds", "")
    if expected_kinds is not None and tags != expected_kinds:
        raise InvalidBlockFile(f"layer kinds {tags!r}, expected {expected_kinds!r}")
    kinds = parse_tags(tags) if tags else ((FULL, 0),) * num_layers
    if kinds is None or len(kinds) != num_layers:
        raise InvalidBlockFile(f"bad layer kinds {tags!r} for {num_layers} layers")
    kv = meta.get("kv", "")
    if expected_kv is not None and kv != expected_kv:
        raise InvalidBlockFile(f"KV format {kv!r}, expected {expected_kv!r}")
    quant = parse_kv(kv) if kv else None
    if kv and quant is None:
        raise InvalidBlockFile(f"bad KV format {kv!r}")
    per_layer = tensor_names(kinds, kv)
    if set(header) - {"__metadata__"} != {name for names in per_layer for name in names}:
        raise InvalidBlockFile("tensor names do not match the layer kinds")
    spans = []
    for (kind, count), names in zip(kinds, per_layer):
        for name in names:
            info = header[name]
            try:
                shape, start, end = info["shape"], *info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise InvalidBlockFile(f"bad tensor entry {name}") from None
            if not (
                isinstance(shape, list)
                and shape
                and all(isinstance(d, int) and d > 0 for d in shape)
                and shape[0] == 1
            ):
                raise InvalidBlockFile(f"{name} has shape {shape}")
            item = _ITEMSIZE.get(info.get("dtype"))
            if kind == STATE:
                if item is None:
                    raise InvalidBlockFile(f"{name} has unknown dtype {info.get('dtype')}")
            else:
                packed = quant is not None and name.endswith((".k", ".v"))
                if info.get("dtype") != ("U32" if packed else code):
                    raise InvalidBlockFile(f"{name} has dtype {info.get('dtype')}, metadata says {dtype}")
                stored = len(tokens) if kind == FULL else min(len(tokens), count)
                if len(shape) != 4 or shape[2] != stored:
                    raise InvalidBlockFile(f"{name} has shape {shape} for {len(tokens)} tokens")
            elements = 1
            for d in shape:
                elements *= d
            if end - start != elements * item:
                raise InvalidBlockFile(f"{name} size does not match its shape")
            spans.append((start, end))
    if quant is not None:
        _check_quantized_columns(header, kinds, quant)
    spans.sort()
    pos = 0
    for start, end in spans:
        if start != pos:
            raise InvalidBlockFile("tensor data overlaps or leaves gaps")
        pos = end
    if pos != data_bytes:
        raise InvalidBlockFile(f"tensor data is {pos} bytes, the file holds {data_bytes} (truncated?)")
    return BlockHeader(key, parent, tuple(tokens), dtype, num_layers, kinds, pos, st.st_size, st.st_mtime, kv)


def _check_quantized_columns(header: dict, kinds, quant: Tuple[int, int]) -> None:
    """Each quantized layer's packed data and its scales and biases describe one head dim, and
    keys and values one token count and head count."""
    bits, group = quant
    for i, (kind, _) in enumerate(kinds):
        if kind == STATE:
            continue
        shape = {s: header[f"l{i}.{s}"]["shape"] for s in QUANTIZED_SUFFIXES}
        for part in ("k", "v"):
            data, scales, biases = shape[part], shape[part + "s"], shape[part + "b"]
            if scales != biases or data[:3] != scales[:3] or data[3] * 32 // bits != scales[3] * group:
                raise InvalidBlockFile(
                    f"layer {i}: quantized {part} shapes {data}, {scales}, {biases} disagree"
                )
        if shape["k"][:3] != shape["v"][:3]:
            raise InvalidBlockFile(f"layer {i}: keys and values have other heads or tokens")
