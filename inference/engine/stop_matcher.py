"""Finding stop strings in a growing text, each character looked at once.

``StopMatcher`` is an Aho-Corasick automaton over a request's stop strings. Its states are the
prefixes of the stop strings (a trie); after the text read so far, the state is the longest
suffix of that text that is a prefix of some stop string. So one state answers both questions
the text stream asks after each token:

- did a stop string end in the new text (``out``: the longest stop string ending at a state,
  through its suffix links), and where does the earliest of them start;
- how much of the text's end could still become a stop string: the state's depth, the text to
  hold back.

``feed`` costs amortized O(1) per character whatever the number and length of the stop strings
(each character moves one step down the trie, and the fallbacks along suffix links never undo
more steps than were made); building costs O(total length of the stop strings).
"""

from __future__ import annotations

from collections import deque
from typing import Dict, List, Optional, Sequence, Tuple


class StopMatcher:
    """The automaton of ``stops`` and the position of the text fed so far.

    Invariants: ``_goto[s]`` maps a character to the child state (one more character of some
    stop string); ``_fail[s]`` is the state of the longest proper suffix of ``s``'s prefix that
    is itself a prefix of a stop string; ``_out[s]`` is the length of the longest stop string
    that is a suffix of ``s``'s prefix (0: none); ``_depth[s]`` is the length of ``s``'s prefix.
    """

    def __init__(self, stops: Sequence[str]):
        goto: List[Dict[str, int]] = [{}]
        depth, out = [0], [0]
        for stop in stops:
            state = 0
            for ch in stop:
                nxt = goto[state].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto[state][ch] = nxt
                    goto.append({})
                    depth.append(depth[state] + 1)
                    out.append(0)
                state = nxt
            out[state] = len(stop)
        fail = [0] * len(goto)
        queue = deque(goto[0].values())
        while queue:  # breadth first: a state's fallback is shallower, so it is done already
            state = queue.popleft()
            if not out[state]:
                out[state] = out[fail[state]]
            for ch, child in goto[state].items():
                if state:  # children of the root fall back to the root
                    back = fail[state]
                    while back and ch not in goto[back]:
                        back = fail[back]
                    fail[child] = goto[back].get(ch, 0)
                queue.append(child)
        self._goto, self._fail, self._depth, self._out = goto, fail, depth, out
        self._state = 0
        self.position = 0  # characters fed so far

    @property
    def pending(self) -> int:
        """Characters at the end of the text fed so far that could still start a stop string
        (a proper prefix of one: a whole one would have matched)."""
        return self._depth[self._state]

    def feed(self, text: str) -> Optional[Tuple[int, int]]:
        """Read ``text`` (the characters after those fed so far); returns (start, length) of the
        stop string that starts first among those ending in ``text`` (the shortest of those
        starting there), positions counted from the first character ever fed; None if none."""
        goto, fail, out = self._goto, self._fail, self._out
        state, end = self._state, self.position
        best: Optional[Tuple[int, int]] = None
        for ch in text:
            while state and ch not in goto[state]:
                state = fail[state]
            state = goto[state].get(ch, 0)
            end += 1
            length = out[state]
            if length and (best is None or end - length < best[0]):
                best = (end - length, length)
        self._state, self.position = state, end
        return best
