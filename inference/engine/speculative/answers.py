"""The earlier answers of one served model, for the suffix drafter: a ``SuffixTree`` per cache
salt (None: the shared, unsalted one), under one bound in tokens and nodes for them all."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Sequence

from .suffix_tree import SuffixTree


@dataclass
class _Answer:
    salt: Optional[str]
    tokens: List[int]
    folded: int = 0  # its windows in its tree start before this position ...
    removed: int = 0  # ... and not before this one (it is being evicted)


class AnswerStore:
    """Answers (output tokens of finished requests) waiting to be folded into their salt's tree,
    then held there until evicted, oldest added first.

    Invariants: the answers in ``_held`` are in the order they were added, the ones folded whole
    first, then at most one folded in part (index ``_unfolded``), then the queued ones; ``tokens``
    is their length and ``nodes`` the trees' nodes (about 290 bytes each). A tree with no answer
    is dropped. A request drafts only from its own salt's tree: answers of one salt never reach
    another's drafts.

    Engine thread only: ``add`` is called as requests finish, ``fold`` once per decode step. So
    that no step waits for a long answer, ``add`` only queues it, and ``fold`` spends at most
    ``budget`` windows (O(depth) each): first removing the oldest answer's windows while the store
    is over ``max_tokens`` or ``max_nodes``, then adding queued ones. So the bounds hold after
    each fold within one fold's work (``budget`` tokens, ``budget * depth`` nodes) once the
    queue is folded; ``add`` refuses an answer that would take the store past twice
    ``max_tokens`` (folds fall behind only while answers come faster than steps).
    """

    MAX_ANSWER = 4096  # an answer's first tokens kept (agents' scaffolding opens an answer)

    def __init__(self, max_tokens: int = 65536, max_nodes: int = 1 << 17, **tree_options):
        self.max_tokens, self.max_nodes = max_tokens, max_nodes
        self.tree_options = tree_options
        self.trees: Dict[Optional[str], SuffixTree] = {}
        self._held: Deque[_Answer] = deque()
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
        tokens = list(tokens[: self.MAX_ANSWER])
        if len(tokens) < 2 or self.tokens + len(tokens) > 2 * self.max_tokens:
            return
        self._held.append(_Answer(salt, tokens))
        self.tokens += len(tokens)

    def over(self) -> bool:
        return self.tokens > self.max_tokens or self.nodes > self.max_nodes

    def fold(self, budget: int = 64) -> None:
        """Spend up to ``budget`` windows: evicting the oldest answers while over the bounds,
        then folding queued answers into their trees, oldest first."""
        while budget > 0 and self._held and self.over():
            budget -= self._evict(budget)
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

    def _evict(self, budget: int) -> int:
        """Remove up to ``budget`` windows of the oldest answer, and the answer once none is
        left; the windows removed."""
        answer = self._held[0]
        stop = min(answer.folded, answer.removed + budget)
        tree = self.trees.get(answer.salt)
        if stop > answer.removed:
            before = tree.nodes
            tree.remove(answer.tokens, answer.removed, stop)
            self.nodes -= before - tree.nodes
        spent, answer.removed = stop - answer.removed, stop
        if stop == answer.folded:
            self._held.popleft()
            self._unfolded = max(0, self._unfolded - 1) if stop == len(answer.tokens) else 0
            self.tokens -= len(answer.tokens)
            if tree is not None and tree.nodes == 0:
                del self.trees[answer.salt]
        return max(spent, 1)
