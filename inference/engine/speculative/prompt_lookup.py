"""Prompt lookup: the next tokens are guessed by finding the request's last few tokens earlier
in its own prompt and output and copying what followed them there. Agents make this pay: an
answer that edits a file, or repeats a tool call, copies long runs of its prompt."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .drafter import Drafter


class PromptLookupDrafter(Drafter):
    """An index over the tokens seen: for each n-gram (n = 1..``max_ngram``) the position
    right after its most recent occurrence that has a follower. ``propose`` looks up the
    longest suffix of the tokens that occurred before, most recent occurrence first, and
    returns what followed it (continued as a loop when that runs into the end).

    Invariants: ``_next[n - 1][gram]`` is a position p < len(tokens) with
    ``tokens[p - n:p] == gram``, the largest such p. The last token's own n-grams are indexed
    only when the next token arrives (they have no follower yet), so a lookup never finds the
    suffix itself. ``extend`` costs O(max_ngram) per token, ``propose`` O(max_ngram + k).
    """

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self.tokens: List[int] = []
        self._next: List[Dict[Tuple[int, ...], int]] = [{} for _ in range(max_ngram)]

    @property
    def seen(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        seq = self.tokens
        for token in tokens:
            p = len(seq)  # the position ``token`` takes: it follows the n-grams ending at p - 1
            for n in range(1, min(self.max_ngram, p) + 1):
                self._next[n - 1][tuple(seq[p - n : p])] = p
            seq.append(token)

    def propose(self, k: int) -> List[int]:
        return self.lookup(k)[1]

    def lookup(self, k: int) -> Tuple[int, List[int]]:
        """(the length of the match, the proposal): (0, []) when none."""
        seq = self.tokens
        if k < 1:
            return 0, []
        for n in range(min(self.max_ngram, len(seq)), 0, -1):
            start = self._next[n - 1].get(tuple(seq[len(seq) - n :]))
            if start is not None:
                # Past the end, the copy continues from itself: a loop of period
                # len(seq) - start drafts k tokens, not only what is left of its last turn.
                out = seq[start : start + k]
                while len(out) < k:
                    out.append(out[start + len(out) - len(seq)])
                return n, out
        return 0, []
