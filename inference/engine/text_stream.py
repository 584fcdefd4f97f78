"""Incremental detokenization with stop strings."""

from __future__ import annotations

from typing import Sequence, Tuple

from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer

from .stop_matcher import StopMatcher


def streaming_detokenizer(tokenizer):
    """mlx-lm's streaming detokenizer for the tokenizer, keeping a leading space.

    mlx-lm drops the space that starts the first generated token, as if the output began a
    new text; for omlx the output continues the prompt, so " word" must stay " word".
    """
    detokenizer = tokenizer.detokenizer
    if isinstance(detokenizer, BPEStreamingDetokenizer):
        detokenizer._maybe_trim_space = lambda text: text
    elif isinstance(detokenizer, SPMStreamingDetokenizer):
        detokenizer.trim_space = False
    return detokenizer


class TextStream:
    """Turns one request's generated tokens into text deltas, honouring stop strings.

    Text that could still become the start of a stop string is held back, so a partial stop
    string never reaches a stream; once a stop string appears, the text ends before it (or
    after it with ``include_stop``). Tokens that stop generation (EOS, stop ids) add no text.
    Each new character of the text is read once by a ``StopMatcher``: the check is linear in
    the output, whatever the stop strings (it runs on the engine thread).
    """

    def __init__(self, detokenizer, stop: Sequence[str] = (), include_stop: bool = False):
        self._detok = detokenizer
        self._matcher = StopMatcher(stop) if stop else None
        self._include_stop = include_stop
        self._emitted = 0  # characters of visible text already handed out
        self.stopped = False

    def add(self, token_id: int) -> Tuple[str, bool]:
        """Add a generated token; returns (new visible text, whether a stop string matched)."""
        self._detok.add_token(token_id)
        return self._advance(self._detok.text, final=False)

    def flush(self) -> str:
        """The text held back so far, at the end of generation."""
        if self.stopped:
            return ""
        self._detok.finalize()
        return self._advance(self._detok.text, final=True)[0]

    def _advance(self, text: str, final: bool) -> Tuple[str, bool]:
        if self.stopped:
            return "", True
        visible_end = len(text)
        matcher = self._matcher
        if matcher is not None:
            hit = matcher.feed(text[matcher.position :]) if len(text) > matcher.position else None
            if hit is not None:
                start, length = hit
                self.stopped = True
                visible_end = start + (length if self._include_stop else 0)
            elif not final:
                visible_end = min(visible_end, matcher.position - matcher.pending)
        delta = text[self._emitted : visible_end] if visible_end > self._emitted else ""
        self._emitted = max(self._emitted, visible_end)
        return delta, self.stopped
