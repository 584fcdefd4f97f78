"""What a request may carry into an engine: its prompt as token ids (a string encoded, a list
checked against the vocabulary), never empty, within the model's context or its
``context_length`` setting; a picture only for a model that reads them. ValueError with the
message the API returns as a 400. A mixin of ``Engine`` (it uses ``loaded`` and ``encode``)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Union

Prompt = Union[str, Sequence[int]]


class EnginePrompts:
    def context_limit(self, context_length: Optional[int] = None) -> Optional[int]:
        """The most tokens a request may hold, prompt and output: the model's own context, or
        ``context_length`` (the model's setting) when that is smaller; None when neither is known."""
        limits = [limit for limit in (self.loaded.context_length, context_length) if limit]
        return min(limits) if limits else None

    def validate_prompt(self, prompt: Prompt, context_length: Optional[int] = None) -> List[int]:
        """The prompt's token ids; ValueError if it is empty, has ids outside the vocabulary or
        does not fit ``context_limit(context_length)``. The one check of a prompt: the worker
        calls it and then submits with ``checked=True``."""
        if isinstance(prompt, str):
            ids = self.encode(prompt)
        elif isinstance(prompt, (list, tuple)) and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt
        ):
            ids = list(prompt)
            bad = [t for t in ids if not 0 <= t < self.loaded.vocab_size]
            if bad:
                raise ValueError(
                    f"prompt token id {bad[0]} is outside the vocabulary [0, {self.loaded.vocab_size})"
                )
        else:
            raise ValueError("a prompt must be a string or a list of token ids")
        if not ids:
            raise ValueError("the prompt is empty")
        limit = self.context_limit(context_length)
        if limit is not None and len(ids) >= limit:
            source = "" if limit == self.loaded.context_length else " (its context_length setting)"
            raise ValueError(
                f"This model's maximum context length is {limit} tokens{source}; the prompt "
                f"has {len(ids)} tokens"
            )
        return ids

    def _validate_vision(self, vision) -> List[int]:
        if self.loaded.vision is None:
            raise ValueError(f"the model {self.loaded.path.name} does not read images")
        self.validate_prompt(vision.model_ids)
        return list(vision.key_ids)
