"""The interface of a drafter: something that, given a request's tokens so far, proposes the
next few. Drafters are plug-ins: the decode batch only calls ``extend`` and ``propose``; each is
named in ``METHODS`` and made by ``drafters.make_drafter``."""

from __future__ import annotations

from typing import List, Sequence

# The values of the ``speculative`` setting: "off", or the name of a drafter.
METHODS = ("off", "lookup", "suffix")


class Drafter:
    """Proposes tokens for one request. It sees the request's tokens once each, in order
    (``extend``), and must answer ``propose`` in time independent of how many it has seen: it
    runs on the engine thread every speculative step."""

    def extend(self, tokens: Sequence[int]) -> None:
        """Take the request's next tokens (the prompt at first, then each accepted output)."""
        raise NotImplementedError

    @property
    def seen(self) -> int:
        """How many tokens ``extend`` was given."""
        raise NotImplementedError

    def propose(self, k: int) -> List[int]:
        """Up to ``k`` tokens that may follow the tokens seen; fewer (or none) when it has no
        good guess."""
        raise NotImplementedError
