"""Rank 0's model runner: every call that changes what the ranks compute is sent as a step plan
(``PlanChannel``) before it runs here, so the other ranks (``follower``) run the same forward
passes on the same rows in the same order.

The plan is what rank 0 decided, never what a rank could decide alone: which rows prefill how
many tokens and in how large passes, which requests join the decode batch and which leave it,
whether a decode step samples ahead. Sampling is the same on every rank (the same logits, the
same seeds and parameters), so the tokens need no messages: rank 0 sends each joining
request's first token only as a check (``join``).

Messages, in the order rank 0 sends them (ids are request ids):

    lookup   {"tokens": [int, ...], "salt": str or null}  (then every rank: agree_min)
    seed     {"id": id, "tokens": int, "new": request (when new)}
    prefill  {"rows": [[id, n], ...], "new": {id: request}, "pass_tokens": int}
             inside it, after each pass that finished prompts: store / keep / join / drop ...,
             then "done"
    store    {"id": id, "end": int}  (its tokens [0, end) from the last prefill's snapshots)
    keep     {"id": id}  (its caches before they are dropped)
    join     {"id": id, "token": int}
    drop     {"ids": [id, ...]}
    decode   {"ahead": bool}  (the step's tokens are reported, then the pass is queued: launch)
    reset / close
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Optional, Sequence, Set

from inference.engine.model_runner import ModelRunner
from inference.engine.request import Request

from .plan_channel import PlanChannel


class LeaderRunner(ModelRunner):
    """``ModelRunner`` that sends each step plan first (see the module docstring). ``known``:
    the ids of the requests the other ranks hold (sent with their first prefill, forgotten
    with their drop)."""

    def __init__(self, loaded, channel: PlanChannel, clock=None, block_size: Optional[int] = None):
        super().__init__(loaded, block_size, clock)
        self.channel: Optional[PlanChannel] = channel  # None once the group is lost: nothing is sent
        self.known: Set[str] = set()

    def _send(self, message: dict) -> None:
        if self.channel is not None:
            self.channel.send(message)

    tell = _send  # the engine's messages (stores of the block cache: inference.distributed.rank_cache)

    def seed_cache(self, request: Request, layers: list, num_tokens: int) -> None:
        """As ``ModelRunner.seed_cache``; the other ranks seed theirs with the hit they agreed on
        (``AgreedBlockCache.lookup``), the request described to them if it is new."""
        message = {"op": "seed", "id": request.request_id, "tokens": num_tokens}
        if request.request_id not in self.known:
            message["new"] = describe(request)
            self.known.add(request.request_id)
        self._send(message)
        super().seed_cache(request, layers, num_tokens)

    def prefill(self, chunks, on_done, stop, piece, pass_tokens: int) -> dict:
        """As ``ModelRunner.prefill``, with no stop between passes (when a background prefill
        gives way depends on timings, which the other ranks do not share)."""
        new = {}
        for request, _ in chunks:
            if request.request_id not in self.known:
                new[request.request_id] = describe(request)
                self.known.add(request.request_id)
        rows = [[request.request_id, n] for request, n in chunks]
        self._send({"op": "prefill", "rows": rows, "new": new, "pass_tokens": pass_tokens})

        def done(snapshots, finished):
            on_done(snapshots, finished)
            self._send({"op": "done"})

        return super().prefill(chunks, done, None, None, pass_tokens)

    def join(self, request: Request, state) -> None:
        self._send({"op": "join", "id": request.request_id, "token": request.output_token_ids[-1]})
        super().join(request, state)

    def drop(self, requests: Sequence[Request], give_back: bool = False) -> None:
        ids = [r.request_id for r in requests if r.request_id in self.known]
        if ids:
            self._send({"op": "drop", "ids": ids, "give_back": give_back})
            self.known.difference_update(ids)
        super().drop(requests, give_back)

    def decode_step(self, ahead: bool = True):
        if not len(self.batch):
            return []
        self._send({"op": "decode", "ahead": ahead})
        return super().decode_step(ahead)

    def reset(self) -> None:
        self._send({"op": "reset"})
        self.known.clear()
        super().reset()


def describe(request: Request) -> dict:
    """What another rank needs to run ``request``: its tokens so far, sampling parameters, seed."""
    params = asdict(request.params)
    params["stop"] = list(params["stop"])
    params["stop_token_ids"] = list(params["stop_token_ids"])
    return {
        "prompt": request.prompt_token_ids,
        "output": request.output_token_ids,
        "params": params,
        "seed": request.seed,
        "salt": request.cache_salt,
    }
