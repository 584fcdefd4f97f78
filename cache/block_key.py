"""Block identity: chained hashes over canonical bytes, rooted in the model fingerprint."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

FORMAT_VERSION = 1  # bump when the block layout or file format changes: old blocks become misses
KEY_BYTES = 32

_SAMPLE = 1 << 16  # bytes read at each sampled offset of a weights file
_SAMPLES = 32


@dataclass(frozen=True)
class ModelFingerprint:
    """Everything that decides what a block's KV is, except its tokens.

    Two processes that load the same weights with the same tokenizer, dtype, KV layout and block
    size get the same fingerprint, so their block keys agree, also after a restart.
    """

    weights: str  # digest of the weight files (names, sizes and sampled contents)
    tokenizer: str  # digest of the tokenizer files
    dtype: str
    kv_layout: str  # e.g. "kv:24x2x64" (layers x kv heads x head dim)
    block_size: int
    format_version: int = FORMAT_VERSION

    def root_key(self) -> bytes:
        canonical = json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(b"omlx-root\0" + canonical).digest()

    @property
    def hex(self) -> str:
        """Names the cold tier's directory for this model."""
        return self.root_key().hex()[:32]


def block_key(parent: bytes, token_ids: Sequence[int], extra: bytes = b"") -> bytes:
    """H(parent || number of tokens || tokens as little-endian uint32 || extra).

    The count is hashed so a partial block never shares a key with a longer one.
    """
    if len(parent) != KEY_BYTES:
        raise ValueError(f"parent key must be {KEY_BYTES} bytes, got {len(parent)}")
    h = hashlib.sha256()
    h.update(parent)
    h.update(struct.pack("<I", len(token_ids)))
    h.update(struct.pack(f"<{len(token_ids)}I", *token_ids))
    h.update(struct.pack("<I", len(extra)))
    h.update(extra)
    return h.digest()


def salted_root(root: bytes, salt: Optional[str]) -> bytes:
    """The seed of a request's block chain: the model's root key, or, with a cache salt, a hash of
    the root and the salt (vLLM's ``cache_salt``). The salt thus enters the first block's key and,
    through the chain, every later one: requests under different salts share no block, in RAM or
    on disk, and no salt gives the unsalted keys exactly (caches written before salts stay valid)."""
    if salt is None:
        return root
    return hashlib.sha256(b"omlx-salt\0" + root + salt.encode("utf-8", "surrogatepass")).digest()


def adapter_salt(salt: Optional[str], adapter_digest: str) -> str:
    """The cache salt of a request run with a LoRA adapter: the adapter's identity (the digest
    of its weights) before the request's own salt, so an adapter's blocks are never its base's
    nor another adapter's, and tenants stay apart under one adapter as under the base. API salts
    start with ``body:``, ``key:`` or ``console`` (inference.api.common.cache_salt), so no
    request can name an adapter's namespace."""
    return f"adapter:{adapter_digest}" + ("" if salt is None else f"|{salt}")


def digest_files(paths: Sequence[Path], sample: bool) -> str:
    """A digest of files' names, sizes and contents. With ``sample``, only a fixed number of
    evenly spaced chunks of each file are read: enough to tell weight files apart (two
    checkpoints of one shape differ everywhere) without reading gigabytes at every load."""
    h = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        size = path.stat().st_size
        h.update(f"{path.name}\0{size}\0".encode())
        with open(path, "rb") as f:
            if not sample or size <= _SAMPLE * _SAMPLES:
                h.update(f.read())
                continue
            step = (size - _SAMPLE) // (_SAMPLES - 1)
            for i in range(_SAMPLES):
                f.seek(i * step)
                h.update(f.read(_SAMPLE))
    return h.hexdigest()


def fingerprint_model_folder(
    path: Path, dtype: str, kv_layout: str, block_size: int, weights_digest: Optional[str] = None
) -> ModelFingerprint:
    path = Path(path)
    weights = weights_digest or digest_files(list(path.glob("*.safetensors")), sample=True)
    tokenizer_files = [
        p
        for p in path.iterdir()
        if p.name.startswith(("tokenizer", "special_tokens"))
        or p.suffix in (".tiktoken", ".jinja")
        or p.name == "chat_template.json"
    ]
    tokenizer = digest_files(tokenizer_files, sample=False)
    return ModelFingerprint(weights, tokenizer, dtype, kv_layout, block_size)
