"""The earlier answers of one served model, for the suffix drafter: a ``SuffixTree`` per cache
salt (None: the shared, unsalted one), under one bound in tokens and nodes for them all."""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, Optional, Sequence

from .suffix_tree import SuffixTree


@dataclass
class _Answer:
    salt: Optional[str]
    tokens: array
    folded: int = 0  # windows of it in its tree: those starting before this position


class AnswerStore:
    """Answers (output tokens of finished requests) waiting to be folded into their salt's tree,
    then held there until evicted, oldest added first.

    Invariants: ``tokens`` is the length of the answers held (folded or not) and stays at most
    ``max_tokens``; the trees' nodes together stay at most ``max_nodes`` (about 200 bytes each)
    after each ``fold``; a tree with no answer is dropped. A request drafts only from its own
    salt's tree: answers of one salt never reach another's drafts.

    Engine thread only: ``add`` is called as requests finish, ``fold`` once per decode step. So
    that no step waits for a long answer, ``add`` only queues it and ``fold`` puts at most
    ``budget`` tokens' windows into the trees (O(depth) each), evicting as it goes.
    """

    MAX_ANSWER = 4096  # an answer's first tokens kept (agents' scaffolding opens an answer)

    def __init__(self, max_tokens: int = 65536, max_nodes: int = 1 << 17, **tree_options):
        self.max_tokens, self.max_nodes = max_tokens, max_nodes
        self.tree_options = tree_options
        self.trees: Dict[Optional[str], SuffixTree] = {}
        self._held: Deque[_Answer] = deque()  # oldest first; the folded ones before the others
        self._unfolded = 0  # index in _held of the first answer not folded whole
        self.tokens = 0
        self.nodes = 0  # the trees' together

    def tree(self, salt: Optional[str]) -> Optional[SuffixTree]:
        """The tree of answers given with ``salt`` (None when there is none)."""
        return self.trees.get(salt)

    def salts(self) -> set:
        """The salts of the answers held (folded or queued)."""
        return {answer.salt for answer in self._held}

    def add(self, tokens: Sequence[int], salt: Optional[str] = None) -> None:
        """Queue an answer of ``salt``'s requests (only its first ``MAX_ANSWER`` tokens)."""
        if len(tokens) < 2:
            return
        answer = _Answer(salt, array("l", tokens[: self.MAX_ANSWER]))
        self._held.append(answer)
        self.tokens += len(answer.tokens)
        while self.tokens > self.max_tokens:
            self._evict()

    def fold(self, budget: int = 512) -> None:
        """Put up to ``budget`` queued tokens' windows into their trees, oldest first, then
        evict the oldest answers while the trees hold more than ``max_nodes``."""
        while budget > 0 and self._unfolded < len(self._held):
            answer = self._held[self._unfolded]
            tree = self.trees.get(answer.salt)
            if tree is None:
                tree = self.trees[answer.salt] = SuffixTree(**self.tree_options)
            stop, before = min(len(answer.tokens), answer.folded + budget), tree.nodes
            tree.add(answer.tokens, answer.folded, stop)
            self.nodes += tree.nodes - before
            budget -= stop - answer.folded
            answer.folded = stop
            if stop == len(answer.tokens):
                self._unfolded += 1
        while self._held and self.nodes > self.max_nodes:
            self._evict()

    def _evict(self) -> None:
        answer = self._held.popleft()
        self._unfolded = max(0, self._unfolded - 1) if answer.folded == len(answer.tokens) else 0
        self.tokens -= len(answer.tokens)
        if answer.folded:
            tree = self.trees[answer.salt]
            before = tree.nodes
            tree.remove(answer.tokens, answer.folded)
            self.nodes -= before - tree.nodes
            if tree.nodes == 0:
                del self.trees[answer.salt]
