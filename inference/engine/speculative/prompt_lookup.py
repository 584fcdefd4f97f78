"""Prompt lookup: the next tokens are guessed by finding the request's last few tokens earlier
in its own prompt and output and copying what followed them there. Agents make this pay: an
answer that edits a file, or repeats a tool call, copies long runs of its prompt."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .drafter import Drafter


class PromptLookupDrafter(Drafter):
    """An index over the tokens seen: for each n-gram (n = 1..``max_ngram``) the position
    right after its most recent occurrence that has a follower. ``propose`` looks up the
    longest suffix of the tokens that occurred before, most recent occurrence first, and
    returns what followed it (continued as a loop when that runs into the end).

    A copy that keeps matching is followed (``follow``): the drafter keeps the position its
    last lookup copied from and moves it on with every token that matches there, so it knows
    how long that match has run. Once it has run ``follow`` tokens or more, the proposals
    come from it rather than from the most recent short n-gram: in text that repeats
    itself with variations (a file of similar functions, each with its own name and numbers),
    the most recent occurrence of the last three tokens is often the previous variant, while
    the long match is the stretch being copied. A token that does not match ends it; the
    next lookup starts from the n-gram again.

    Invariants: ``_next[n - 1][gram]`` is a position p < len(tokens) with
    ``tokens[p - n:p] == gram``, the largest such p. The last token's own n-grams are indexed
    only when the next token arrives (they have no follower yet), so a lookup never finds the
    suffix itself. The followed match: ``_at`` < len(tokens) with
    ``tokens[_at - _run:_at] == tokens[-_run:]`` (None: none). ``extend`` costs O(max_ngram) per
    token, ``propose`` O(max_ngram + k).
    """

    def __init__(self, max_ngram: int = 3, follow: int = 8):
        self.max_ngram, self.follow = max_ngram, follow
        self.tokens: List[int] = []
        self._next: List[Dict[Tuple[int, ...], int]] = [{} for _ in range(max_ngram)]
        self._at: Optional[int] = None  # where the followed match continues (tokens[_at] next)
        self._run = 0  # how many tokens it has matched

    @property
    def seen(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        seq = self.tokens
        for token in tokens:
            p = len(seq)  # the position ``token`` takes: it follows the n-grams ending at p - 1
            if self._at is not None:
                if seq[self._at] == token:
                    self._at, self._run = self._at + 1, self._run + 1
                else:
                    self._at, self._run = None, 0
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
        n, start = self._ngram()
        if start is not None and (self._at is None or self._run < n):
            self._at, self._run = start, n  # followed from here on
        if self._at is not None and self._run >= max(n, self.follow):
            n, start = self._run, self._at
        if start is None:
            return 0, []
        # Past the end, the copy continues from itself: a loop of period len(seq) - start
        # drafts k tokens, not only what is left of its last turn.
        out = seq[start : start + k]
        while len(out) < k:
            out.append(out[start + len(out) - len(seq)])
        return n, out

    def _ngram(self) -> Tuple[int, Optional[int]]:
        """(n, the position after the most recent earlier occurrence of the last n tokens) for
        the longest n <= ``max_ngram`` that occurred before; (0, None) when none did."""
        seq = self.tokens
        for n in range(min(self.max_ngram, len(seq)), 0, -1):
            start = self._next[n - 1].get(tuple(seq[len(seq) - n :]))
            if start is not None:
                return n, start
        return 0, None
