"""A chat prompt with images, as the engine runs and keys it.

The processor expands each image into a run of image tokens (all the same id, e.g. LLaVA's
``<image>``). Their KV depends on the image, not on that id, so the engine must not key blocks
by it. ``VisionPrompt.key_ids`` is the prompt with every image token replaced by a *key id*:
an id at or above 2**31 (outside every vocabulary) drawn from the SHA-256 of that image's pixel
values (as the model sees them) and the token's index within the image. The engine queues the
request with ``key_ids`` as its prompt, so everything keyed by token ids (block keys, the hot
and cold tiers, in-flight prefix sharing) includes the image content: a repeated image after
the same text is a cache hit, a changed one diverges at its first image token and never hits
past it. Text-only requests have no key ids and keep the full block cache.

Invariant: ``key_ids[i] == model_ids[i]`` except at image positions; the model never sees a key
id (``inputs`` gives it embeddings for a range with image tokens, real ids otherwise).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import mlx.core as mx
import numpy as np

KEY_ID_BASE = 1 << 31  # key ids live in [2**31, 2**32): never a real token


def key_id(image_digest: bytes, index: int) -> int:
    """The key id of token ``index`` of the image whose pixels hash to ``image_digest``."""
    h = hashlib.sha256(image_digest + index.to_bytes(4, "little")).digest()
    return KEY_ID_BASE + (int.from_bytes(h[:4], "little") % KEY_ID_BASE)


@dataclass
class VisionPrompt:
    model_ids: List[int]  # what the processor produced
    key_ids: List[int]  # the same with image tokens replaced by key ids
    pixel_values: np.ndarray
    image_positions: List[int]  # sorted positions of image tokens in the prompt
    digests: List[str] = field(default_factory=list)  # hex SHA-256 of each image's pixels
    _embeddings: Optional[mx.array] = field(default=None, repr=False)

    def has_image_in(self, start: int, end: int) -> bool:
        return any(start <= p < end for p in self.image_positions)

    def inputs(self, vision, all_token_ids: Sequence[int], start: int, end: int) -> Tuple[mx.array, Optional[mx.array]]:
        """(tokens [1, n], input embeddings [1, n, D] or None) for positions [start, end) of the
        request whose tokens are ``all_token_ids`` (prompt key ids, then output ids). A range
        without image tokens runs on real ids; one with them on embeddings (the vision tower
        runs once per request, on the first such range)."""
        prompt_len = len(self.model_ids)
        real = self.model_ids[start:min(end, prompt_len)] + list(all_token_ids[max(start, prompt_len):end])
        tokens = mx.array(real)[None]
        if not self.has_image_in(start, end):
            return tokens, None
        if self._embeddings is None:
            self._embeddings = vision.prompt_embeddings(self.model_ids, self.pixel_values)
        parts = [self._embeddings[start:min(end, prompt_len)]]
        if end > prompt_len:  # a replay after preemption: generated tokens follow the prompt
            parts.append(vision.token_embeddings(all_token_ids[prompt_len:end]).astype(parts[0].dtype))
        return tokens, mx.concatenate(parts)[None]

    def release(self) -> None:
        self._embeddings = None


def prepare(vision, text: str, images: list) -> VisionPrompt:
    """Run the model's processor on the rendered prompt ``text`` (one image placeholder per
    image, as the chat template writes it) and PIL ``images``; ValueError when they disagree."""
    try:
        batch = vision.processor(text=[text], images=images, return_tensors="np")
    except Exception as exc:  # processors raise ValueError, TypeError... for inputs they reject
        raise ValueError(f"the images cannot be processed for this model: {exc}") from None
    ids = [int(t) for t in np.asarray(batch["input_ids"])[0]]
    pixels = np.asarray(batch["pixel_values"])
    positions = [i for i, t in enumerate(ids) if t == vision.image_token_id]
    if not positions or len(positions) % len(images):
        raise ValueError(f"the prompt has {len(positions)} image tokens for {len(images)} images")
    per_image = len(positions) // len(images)
    digests = [hashlib.sha256(str(pixels[i].shape).encode() + np.ascontiguousarray(pixels[i]).tobytes()).digest()
               for i in range(len(images))]
    keys = list(ids)
    for n, pos in enumerate(positions):
        keys[pos] = key_id(digests[n // per_image], n % per_image)
    return VisionPrompt(ids, keys, pixels, positions, [d.hex() for d in digests])
