"""A depth-bounded suffix tree (a trie of every suffix of the answers it holds, cut at
``depth`` tokens) with occurrence counts: what ``suffix.SuffixDrafter`` drafts from."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple


class _Node:
    __slots__ = ("count", "children", "best")

    def __init__(self):
        self.count = 0  # windows (answer, start) whose first tokens spell the path to here
        self.children: Optional[Dict[int, "_Node"]] = None
        self.best: Optional[int] = None  # a child of the highest count; None: not known

    def most_frequent(self) -> Tuple[int, "_Node"]:
        """A child of the highest count, found by a scan only when not known."""
        if self.best is None:
            self.best = max(self.children.items(), key=lambda item: item[1].count)[0]
        return self.best, self.children[self.best]


class SuffixTree:
    """For every answer added and every start position i in it, the window
    ``answer[i:i + depth]`` is a path from the root; each node counts the windows through it.

    Invariants: a path of length <= ``depth`` exists iff it occurs in some answer, so every
    suffix of an occurring sequence occurs too (``match`` bisects on that); a child's count is
    at most its parent's; a node whose count falls to 0 is removed with what is below it (only
    the window being removed went there); ``nodes`` is the number of nodes but the root.
    ``node.best``, when known, is a child of the highest count (on a tie, any of them):
    kept by ``add``, forgotten by ``remove``, found again by a scan of the children the next
    time a draft goes through the node. ``add`` and ``remove`` cost O(depth) per window;
    ``match`` and ``propose`` cost O(max_match * log(max_match) + k * depth) dict lookups, and
    a scan of a node's children only after a removal went through its most frequent child.
    """

    def __init__(self, depth: int = 12, max_match: int = 8, min_match: int = 2, min_probability: float = 0.1):
        if not 1 <= min_match <= max_match < depth:
            raise ValueError("SuffixTree: need 1 <= min_match <= max_match < depth")
        self.depth, self.max_match, self.min_match = depth, max_match, min_match
        self.min_probability = min_probability
        self.root = _Node()
        self.nodes = 0

    def add(self, tokens: Sequence[int], start: int = 0, stop: Optional[int] = None) -> None:
        """Add the windows of ``tokens`` that start at ``start`` .. ``stop - 1`` (all by
        default): an answer may be added in pieces."""
        stop = len(tokens) if stop is None else stop
        for i in range(start, stop):
            node = self.root
            for token in tokens[i : i + self.depth]:
                if node.children is None:
                    node.children = {}
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                    self.nodes += 1
                child.count += 1
                if node.best is not None and child.count > node.children[node.best].count:
                    node.best = token
                node = child

    def remove(self, tokens: Sequence[int], start: int = 0, stop: Optional[int] = None) -> None:
        """Remove the windows of ``tokens`` that start at ``start`` .. ``stop - 1`` (all by
        default): exactly what ``add`` put there."""
        stop = len(tokens) if stop is None else stop
        for i in range(start, stop):
            node = self.root
            window = tokens[i : i + self.depth]
            for j, token in enumerate(window):
                child = node.children[token]
                child.count -= 1
                if node.best == token:
                    node.best = None  # another child may have more now
                if child.count == 0:  # only this window went below: it goes with it
                    del node.children[token]
                    if not node.children:
                        node.children = None
                    self.nodes -= len(window) - j
                    break
                node = child

    def _find(self, path: Sequence[int]) -> Optional[_Node]:
        node = self.root
        for token in path:
            if node.children is None:
                return None
            node = node.children.get(token)
            if node is None:
                return None
        return node

    def match(self, context: Sequence[int]) -> Tuple[int, Optional[_Node]]:
        """(m, node): the longest suffix of ``context`` (at most ``max_match`` tokens) that
        occurs and has a continuation, and its node; (0, None) when none of ``min_match``
        tokens or more does."""
        lo, hi = 0, min(len(context), self.max_match)
        while lo < hi:  # the largest m whose suffix occurs: occurring is monotone in m
            mid = (lo + hi + 1) // 2
            if self._find(context[len(context) - mid :]) is not None:
                lo = mid
            else:
                hi = mid - 1
        for m in range(lo, self.min_match - 1, -1):  # one that ends an answer continues nowhere
            node = self._find(context[len(context) - m :])
            if node.children:
                return m, node
        return 0, None

    def propose(self, context: Sequence[int], k: int) -> Tuple[int, List[int]]:
        """(the match length, up to ``k`` tokens): from the longest match of ``context``'s end,
        the most frequent continuation, child by child, while the product of the children's
        shares stays at least ``min_probability``. At ``depth`` the walk matches again on the
        context and the tokens drafted so far."""
        out: List[int] = []
        tail = list(context[max(0, len(context) - self.max_match) :])
        first, probability = 0, 1.0
        while len(out) < k:
            m, node = self.match(tail)
            if node is None:
                break
            first = first or m
            drafted = len(out)
            while len(out) < k and node.children:
                token, child = node.most_frequent()
                probability *= child.count / node.count
                if probability < self.min_probability:
                    return first, out
                out.append(token)
                node = child
            if len(out) == drafted:
                break
            tail = (tail + out[drafted:])[-self.max_match :]
        return first, out
