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

The image digest covers the pixel values *and* the image's grid (Qwen-VL's ``image_grid_thw``:
its patches come flattened, and two pictures of the same patch count but another shape place
their tokens at other M-RoPE positions). For the M-RoPE families (inference.vision.model) a
prompt also carries its positions, computed once from the whole prompt on the engine thread:
every range it computes, from the start or after a block-cache hit, gets its slice of them, and
the tokens after the prompt get ``index + rope_delta``.
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
    digests: List[str] = field(default_factory=list)  # hex SHA-256 of each image's pixels and grid
    extras: dict = field(default_factory=dict)  # other processor outputs the model reads (image_grid_thw)
    rope_delta: int = 0  # M-RoPE: position of token i >= len(prompt) is i + rope_delta (set by inputs)
    _embeddings: Optional[mx.array] = field(default=None, repr=False)
    _deepstack: Optional[mx.array] = field(default=None, repr=False)  # Qwen3-VL [layers, images tokens, D]
    _positions: Optional[mx.array] = field(default=None, repr=False)  # M-RoPE [3, len(prompt)]

    def has_image_in(self, start: int, end: int) -> bool:
        return any(start <= p < end for p in self.image_positions)

    def inputs(self, vision, all_token_ids: Sequence[int], start: int, end: int) -> Tuple[mx.array, dict]:
        """(tokens [1, n], keyword arguments of the engine's model call) for positions
        [start, end) of the request whose tokens are ``all_token_ids`` (prompt key ids, then
        output ids). A range without image tokens runs on real ids; one with them on
        ``input_embeddings`` (the vision tower runs once per request, on the first such range).
        M-RoPE families get ``position_ids`` for every range; Qwen3-VL's deepstack features
        come with a range that has image tokens."""
        prompt_len = len(self.model_ids)
        real = self.model_ids[start : min(end, prompt_len)] + list(
            all_token_ids[max(start, prompt_len) : end]
        )
        tokens = mx.array(real)[None]
        kwargs = {}
        if vision.mrope:
            kwargs["position_ids"] = self._position_slice(vision, start, end)
        if not self.has_image_in(start, end):
            return tokens, kwargs
        if self._embeddings is None:
            self._embeddings, self._deepstack = vision.prompt_embeddings(
                self.model_ids, self.pixel_values, self.extras
            )
        parts = [self._embeddings[start : min(end, prompt_len)]]
        if end > prompt_len:  # a replay after preemption: generated tokens follow the prompt
            parts.append(vision.token_embeddings(all_token_ids[prompt_len:end]).astype(parts[0].dtype))
        kwargs["input_embeddings"] = mx.concatenate(parts)[None]
        if self._deepstack is not None:
            first = sum(1 for p in self.image_positions if p < start)
            last = sum(1 for p in self.image_positions if p < end)
            mask = [p in self._image_set for p in range(start, end)]
            kwargs["visual_pos_masks"] = mx.array(mask)[None]
            kwargs["deepstack_visual_embeds"] = self._deepstack[:, first:last]
        return tokens, kwargs

    @property
    def _image_set(self):
        return set(self.image_positions)

    def _position_slice(self, vision, start: int, end: int) -> mx.array:
        """[3, 1, n] M-RoPE positions of tokens [start, end)."""
        if self._positions is None:
            self._positions, self.rope_delta = vision.prompt_positions(self.model_ids, self.extras)
        prompt_len = len(self.model_ids)
        parts = [self._positions[:, start : min(end, prompt_len)]]
        if end > prompt_len:  # tokens after the prompt (a replay after preemption)
            after = mx.arange(max(start, prompt_len), end) + self.rope_delta
            parts.append(mx.broadcast_to(after[None], (3, after.shape[0])).astype(parts[0].dtype))
        return mx.concatenate(parts, axis=1)[:, None, :]

    def release(self) -> None:
        self._embeddings = self._deepstack = None


def prepare(vision, text: str, images: list) -> VisionPrompt:
    """Run the model's processor on the rendered prompt ``text`` (one image placeholder per
    image, as the chat template writes it) and PIL ``images``; ValueError when they disagree."""
    try:
        batch = vision.processor(text=[text], images=images, return_tensors="np")
    except Exception as exc:  # processors raise ValueError, TypeError... for inputs they reject
        raise ValueError(f"the images cannot be processed for this model: {exc}") from None
    ids = [int(t) for t in np.asarray(batch["input_ids"])[0]]
    pixels = np.asarray(batch["pixel_values"])
    extras = {k: np.asarray(batch[k]) for k in ("image_grid_thw", "image_sizes") if k in batch}
    positions = [i for i, t in enumerate(ids) if t == vision.image_token_id]
    counts, pictures = _per_image(
        pixels, extras, len(images), len(positions), vision.merge_size, getattr(vision, "size_unit", 0)
    )
    if not positions or sum(counts) != len(positions):
        raise ValueError(f"the prompt has {len(positions)} image tokens for {len(images)} images")
    digests = [
        hashlib.sha256(
            str(p.shape).encode() + str(grid).encode() + np.ascontiguousarray(p).tobytes()
        ).digest()
        for p, grid in pictures
    ]
    keys = list(ids)
    image, index = 0, 0
    for pos in positions:
        if index == counts[image]:
            image, index = image + 1, 0
        keys[pos] = key_id(digests[image], index)
        index += 1
    return VisionPrompt(ids, keys, pixels, positions, [d.hex() for d in digests], extras)


def _per_image(pixels: np.ndarray, extras: dict, n_images: int, n_tokens: int, merge: int, unit: int = 0):
    """([image tokens of each image], [(its pixel values, its grid or None)]). Qwen-VL's
    processors give all images' patches in one array and a grid (t, h, w) per image, which
    expands to t*h*w / merge**2 tokens; Pixtral's (Mistral 3) one pixel array per image, padded
    to the largest, and each image's size (h, w), which is (h/unit) * (w/unit) tokens (``unit``:
    patch size times merge); the others one pixel array per image, each the same number of
    tokens."""
    grids = extras.get("image_grid_thw")
    sizes = extras.get("image_sizes")
    if grids is None and sizes is not None and unit:
        if len(sizes) != n_images:
            raise ValueError(f"the processor made {len(sizes)} image sizes for {n_images} images")
        hw = [(int(h), int(w)) for h, w in sizes]
        return (
            [(h // unit) * (w // unit) for h, w in hw],
            [(pixels[i][..., :h, :w], hw[i]) for i, (h, w) in enumerate(hw)],
        )
    if grids is None:
        per = n_tokens // n_images if n_images else 0
        return [per] * n_images, [(pixels[i], None) for i in range(n_images)]
    if len(grids) != n_images:
        raise ValueError(f"the processor made {len(grids)} image grids for {n_images} images")
    patches = [int(np.prod(g)) for g in grids]
    bounds = np.cumsum([0] + patches)
    return (
        [p // merge**2 for p in patches],
        [(pixels[bounds[i] : bounds[i + 1]], tuple(int(x) for x in grids[i])) for i in range(n_images)],
    )
