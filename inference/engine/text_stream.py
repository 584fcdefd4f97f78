"""Incremental detokenization with stop strings."""

from __future__ import annotations

from typing import Sequence, Tuple

from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer


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
    """

    def __init__(self, detokenizer, stop: Sequence[str] = (), include_stop: bool = False):
        self._detok = detokenizer
        self._stop = tuple(stop)
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
        if self._stop:
            start = max(0, self._emitted - max(len(s) for s in self._stop))
            hits = [(text.find(s, start), s) for s in self._stop]
            hits = [(i, s) for i, s in hits if i >= 0]
            if hits:
                index, stop = min(hits)
                self.stopped = True
                visible_end = index + (len(stop) if self._include_stop else 0)
            elif not final:
                visible_end -= self._held_back(text)
        delta = text[self._emitted : visible_end] if visible_end > self._emitted else ""
        self._emitted = max(self._emitted, visible_end)
        return delta, self.stopped

    def _held_back(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of a stop string."""
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest
