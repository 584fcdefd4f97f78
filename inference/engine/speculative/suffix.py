"""Suffix decoding (the idea of vLLM's suffix decoding): drafts from the model's earlier answers
as well as from the request's own tokens. An agent repeats its scaffolding from turn to turn
(the same tool-call JSON, the same phrases around it), which no prompt lookup finds when the
earlier turn is not in the prompt, or in another conversation."""

from __future__ import annotations

from typing import List, Optional, Sequence

from .answers import AnswerStore
from .drafter import Drafter
from .prompt_lookup import PromptLookupDrafter


class SuffixDrafter(Drafter):
    """Two sources, the longer match wins (the request's own on a tie): prompt lookup over the
    request's prompt and output (``PromptLookupDrafter``), and the suffix tree of the answers
    of the request's cache salt (``AnswerStore.tree``), whose most frequent continuation of
    the longest match is drafted (``SuffixTree.propose``). Both answer in time independent of
    how many tokens they hold."""

    def __init__(self, answers: AnswerStore, salt: Optional[str] = None):
        self.answers, self.salt = answers, salt
        self.own = PromptLookupDrafter()

    @property
    def seen(self) -> int:
        return self.own.seen

    def extend(self, tokens: Sequence[int]) -> None:
        self.own.extend(tokens)

    def propose(self, k: int) -> List[int]:
        n, own = self.own.lookup(k)
        tree = self.answers.tree(self.salt)
        if tree is None or k < 1:
            return own
        tokens = self.own.tokens
        m, shared = tree.propose(tokens[max(0, len(tokens) - tree.max_match) :], k)
        return shared if m > n and shared else own
