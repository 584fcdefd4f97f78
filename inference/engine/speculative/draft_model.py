"""A draft model: a smaller model of the same tokenizer (or the target itself) drafts the next
tokens of a row by decoding them greedily, one forward pass per drafted token.

``DraftModel`` is the loaded model an engine drafts with (attached by the model pool, which
loads it as any served model: ``inference.pool.drafts``); ``DraftModelDrafter`` is one row's
drafter over it, with the row's own KV cache of the draft model.
"""

from __future__ import annotations

from typing import List, Sequence

import mlx.core as mx
from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache

from .drafter import Drafter


class DraftModel:
    """A loaded model that drafts for another (the target). ``check`` refuses a draft whose
    tokenizer maps tokens to ids differently from the target's: its drafts would be other
    tokens, all rejected (or, worse, a wrong token id silently taken for another)."""

    PREFILL_CHUNK = 512  # prompt tokens per forward pass when a row's draft cache catches up

    def __init__(self, name: str, loaded, target):
        """``loaded``: the draft model's ``LoadedModel`` (its engine's: the weights are shared),
        ``target``: the ``LoadedModel`` it drafts for. ValueError when it cannot (``check``)."""
        self.name = name
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.limit = target.vocab_size  # a drafted id at or past it ends the draft
        self.check(target)

    def check(self, target) -> None:
        """ValueError unless this model can draft for ``target``: the same tokenizer vocabulary
        (token -> id) and end tokens, and caches that can be trimmed."""
        mine, theirs = _vocabulary(self.tokenizer), _vocabulary(target.tokenizer)
        if mine != theirs:
            differ = sorted(set(mine.items()) ^ set(theirs.items()))[:1]
            example = f" (e.g. {differ[0][0]!r})" if differ else ""
            raise ValueError(
                f"draft model '{self.name}' has another tokenizer than {target.path.name}: "
                f"{len(mine)} tokens against {len(theirs)}, mapped differently{example}; a draft "
                "model must share the target's vocabulary"
            )
        if set(self.tokenizer.eos_token_ids) != set(target.tokenizer.eos_token_ids):
            raise ValueError(f"draft model '{self.name}' has other end-of-sequence tokens than the target")
        if not can_trim_prompt_cache(make_prompt_cache(self.model)):
            raise ValueError(
                f"draft model '{self.name}' has caches that cannot be rolled back (sliding windows or "
                "recurrent state); a draft model must be full attention"
            )

    def drafter(self) -> "DraftModelDrafter":
        """A fresh drafter for one row."""
        return DraftModelDrafter(self)


class DraftModelDrafter(Drafter):
    """One row's drafts from a draft model, decoded greedily over the row's own draft cache.

    State: ``tokens`` (what ``extend`` gave), ``pending`` (draft tokens decoded past them and
    not yet confirmed or refuted), the cache holding the draft model's KV of the first
    ``cached`` tokens of ``tokens + pending``. Invariant: ``cached < len(tokens + pending)``
    (the last token is fed when the next draft is decoded). ``extend`` keeps the pending
    tokens it confirms (so ``propose`` asked twice for one step decodes once) and trims the
    cache back to the first token it refutes; ``propose`` feeds what the cache lacks (the
    prompt in chunks, then one token per accepted token) and decodes the rest of the draft.
    """

    shadow_tokens = 1  # a shadow check costs one pass of the draft model

    def __init__(self, draft: DraftModel):
        self.draft = draft
        self.tokens: List[int] = []
        self.pending: List[int] = []
        self.cache = make_prompt_cache(draft.model)
        self.cached = 0

    @property
    def seen(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        tokens = list(tokens)
        if not tokens:
            return
        n = 0
        while n < min(len(tokens), len(self.pending)) and tokens[n] == self.pending[n]:
            n += 1
        keep = len(self.tokens) + n  # positions of tokens + pending still right
        if self.cached > keep:
            for layer in self.cache:
                layer.trim(self.cached - keep)
            self.cached = keep
        self.pending = self.pending[n:] if n == len(tokens) else []
        self.tokens += tokens

    def propose(self, k: int) -> List[int]:
        if k < 1 or not self.tokens:
            return []
        while len(self.pending) < k:
            tail = self._uncached()
            last = (len(tail) - 1) % self.draft.PREFILL_CHUNK + 1  # the last chunk: one pass
            self._feed(tail[:-last])
            logits = self.draft.model(mx.array([tail[-last:]]), cache=self.cache)
            token = mx.argmax(logits[0, -1]).item()
            self.cached += last
            if token >= self.draft.limit:  # not a token of the target
                for layer in self.cache:
                    layer.trim(1)
                self.cached -= 1
                break
            self.pending.append(token)
        return self.pending[:k]

    def prepare(self) -> None:
        self._feed(self._uncached()[:-1])

    def _feed(self, tokens: List[int]) -> None:
        """Compute the draft model's KV of ``tokens`` (the next uncached ones), in chunks."""
        chunk = self.draft.PREFILL_CHUNK
        for start in range(0, len(tokens), chunk):
            piece = tokens[start : start + chunk]
            self.draft.model(mx.array([piece]), cache=self.cache)
            mx.eval([c.state for c in self.cache])
            self.cached += len(piece)

    def _uncached(self) -> List[int]:
        """The tokens of ``tokens + pending`` past the cache (without copying the others)."""
        n = len(self.tokens)
        if self.cached < n:
            return self.tokens[self.cached :] + self.pending
        return self.pending[self.cached - n :]


def _vocabulary(tokenizer) -> dict:
    """The token -> id map of an mlx-lm ``TokenizerWrapper`` (its Hugging Face tokenizer's)."""
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    return inner.get_vocab()
