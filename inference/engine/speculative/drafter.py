"""The interface of a drafter: something that, given a request's tokens so far, proposes the
next few. Drafters are plug-ins: the decode batch only calls ``extend`` and ``propose``; each is
named in ``METHODS`` and made by ``drafters.make_drafter``."""

from __future__ import annotations

from typing import List, Sequence

# The values of the ``speculative`` setting: "off", or the name of a drafter.
METHODS = ("off", "lookup", "suffix", "draft")


class Drafter:
    """Proposes tokens for one request. It sees the request's tokens once each, in order
    (``extend``), and must answer ``propose`` in time independent of how many it has seen: it
    runs on the engine thread every speculative step."""

    # The most tokens a proposal drafts while the row is in shadow (checked on the host, not
    # verified): None, as many as when drafting; a drafter whose proposals cost device work
    # (a draft model) keeps its shadow checks cheap.
    shadow_tokens = None

    def extend(self, tokens: Sequence[int]) -> None:
        """Take the request's next tokens (the prompt at first, then each accepted output)."""
        raise NotImplementedError

    @property
    def seen(self) -> int:
        """How many tokens ``extend`` was given."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Do now what the tokens seen so far need before a proposal (a draft model computes
        the prompt's KV here: the engine asks when the prompt is done, before its first token)."""

    def propose(self, k: int) -> List[int]:
        """Up to ``k`` tokens that may follow the tokens seen; fewer (or none) when it has no
        good guess."""
        raise NotImplementedError
