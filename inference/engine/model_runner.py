"""Runs the model: prefill chunks of single requests, and one batched decode step for all
decoding requests. All of it happens on the engine thread."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, make_prompt_cache

from .model_loader import LoadedModel
from .request import Request, RequestStatus, TokenLogprob
from .sampler import RowState, Sampler


PROMPT = "prompt"  # a row's last prompt token: nothing to report
NEW = "new"  # a generated token the host has not seen yet
REPORTED = "reported"  # a generated token already reported


class DecodeBatch:
    """The rows that decode together, their KV in mlx-lm batch caches (left-padded).

    Pipelined like mlx-lm's own generators: a step queues the forward pass for the current
    inputs and returns the tokens of the previous step, which were computed meanwhile. So
    ``inputs[i]`` is row i's next input: its last prompt token when it has just joined,
    otherwise the token sampled for it by the last step (``kinds[i]`` says which).
    Invariant: row i's KV holds all its tokens but ``inputs[i]``.
    """

    def __init__(self, model, sampler: Sampler):
        self.model = model
        self.sampler = sampler
        self.rows: List[Request] = []
        self._states: List[RowState] = []
        self._cache: Optional[list] = None
        self._inputs: Optional[mx.array] = None
        self._kinds: List[str] = []  # what inputs[i] is: PROMPT, NEW or REPORTED
        self._logprobs: List[Optional[tuple]] = []

    def __len__(self):
        return len(self.rows)

    @property
    def padded_length(self) -> int:
        return self._cache[0].size() if self._cache else 0

    def join(self, request: Request, state: RowState) -> None:
        caches = [type(c).merge([c]) for c in request.cache]
        request.cache = None
        token = mx.array([request.all_token_ids[-1]], dtype=mx.uint32)
        if self._cache is None:
            self._cache, self._inputs = caches, token
        else:
            for batch_cache, cache in zip(self._cache, caches):
                batch_cache.extend(cache)
            self._inputs = mx.concatenate([self._inputs, token])
        self.rows.append(request)
        self._states.append(state)
        self._kinds.append(PROMPT)
        self._logprobs.append(None)

    def remove(self, requests: Sequence[Request]) -> None:
        gone = set(id(r) for r in requests)
        keep = [i for i, r in enumerate(self.rows) if id(r) not in gone]
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.__init__(self.model, self.sampler)
            return
        for c in self._cache:
            c.filter(keep)
        self._inputs = self._inputs[mx.array(keep)]
        self.rows = [self.rows[i] for i in keep]
        self._states = [self._states[i] for i in keep]
        self._kinds = [self._kinds[i] for i in keep]
        self._logprobs = [self._logprobs[i] for i in keep]

    def extract(self, request: Request) -> Tuple[List[int], list]:
        """A copy of one row's KV as (token ids, [(keys, values)] per layer)."""
        i = self.rows.index(request)
        layers = [(c.keys, c.values) for c in (bc.extract(i) for bc in self._cache)]
        n = layers[0][0].shape[2]
        return request.all_token_ids[:n], layers

    def step(self) -> List[Tuple[Request, int, Optional[TokenLogprob]]]:
        """Queue one decode step; return the (request, token, logprob) now known on the host.

        Those are the tokens of the previous step, computed while the host handled its
        results; except that rows which just joined get their first token from this very
        step (waited for), so joining costs no extra step of time to first token.

        A batch with structured-output rows cannot sample ahead: a row's mask for this step
        depends on its previous token. So the forward pass is queued first, the previous
        tokens are waited for, the matchers advanced and the masks built while the forward
        runs, and only then is this step's sampling queued. Batches without such rows keep
        the plain pipeline. A matcher advances by each token exactly when it reaches the host.
        """
        logits = self.model(self._inputs[:, None], cache=self._cache)[:, -1, :]
        previous, kinds, previous_lp = self._inputs, self._kinds, self._logprobs
        matchers = [s.matcher for s in self._states]
        structured = any(m is not None for m in matchers)
        host = masks = None
        if structured:
            mx.async_eval(logits)
            host = previous.tolist()
            for i, kind in enumerate(kinds):
                if kind is NEW and matchers[i] is not None:
                    matchers[i].advance(host[i])
            masks = self._masks(matchers)
        tokens, logprobs = self.sampler.sample(logits, self._states, masks)
        mx.async_eval(tokens, [x for lp in logprobs if lp is not None for x in lp if x is not None])
        self._inputs, self._logprobs = tokens, logprobs
        self._kinds = [NEW] * len(self.rows)
        results = []
        if PROMPT in kinds:
            now = tokens.tolist()
            for i, kind in enumerate(kinds):
                if kind is PROMPT:
                    results.append((self.rows[i], now[i], _to_host(logprobs[i], now[i])))
                    self._kinds[i] = REPORTED
                    if matchers[i] is not None:
                        matchers[i].advance(now[i])
        if host is None:
            host = previous.tolist()
        for i, kind in enumerate(kinds):
            if kind is NEW:
                results.append((self.rows[i], host[i], _to_host(previous_lp[i], host[i])))
        return results

    def _masks(self, matchers) -> np.ndarray:
        """The allowed-token bitmasks of the rows that have a matcher, in row order."""
        active = [m for m in matchers if m is not None]
        masks = np.empty((len(active), (self.sampler.vocab_size + 31) // 32), dtype=np.int32)
        for row, m in zip(masks, active):
            m.fill_mask(row)
        return masks


def _to_host(lp: Optional[tuple], token: int) -> Optional[TokenLogprob]:
    if lp is None:
        return None
    chosen, top_ids, top_lps = lp
    top = list(zip(top_ids.tolist(), top_lps.tolist())) if top_ids is not None else []
    return TokenLogprob(token, chosen.item(), top)


class ModelRunner:
    """Owns the model's forward passes and every request's KV while it is running."""

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded
        self.model = loaded.model
        self.sampler = Sampler(loaded.vocab_size)
        self.batch = DecodeBatch(self.model, self.sampler)

    def seed_cache(self, request: Request, layers: list) -> None:
        """Start a request's KV from a cached prefix ([(keys, values)] per layer)."""
        cache = make_prompt_cache(self.model)
        for c, (k, v) in zip(cache, layers):
            c.keys, c.values, c.offset = k, v, k.shape[2]
        request.cache = cache

    def prefill(self, request: Request, n: int) -> None:
        """Run the next n not-yet-computed tokens of the request through the model."""
        if request.cache is None:
            request.cache = make_prompt_cache(self.model)
        if n == 0:
            return
        start = request.num_computed
        tokens = mx.array(request.all_token_ids[start : start + n])[None]
        self.model(tokens, cache=request.cache)  # logits stay unevaluated: only the KV is needed
        mx.eval([c.state for c in request.cache])
        request.num_computed += n

    def prompt_kv(self, request: Request) -> Tuple[List[int], list]:
        """The KV of a request whose prefill just finished, as (token ids, per-layer arrays)."""
        layers = []
        for c in request.cache:
            if not isinstance(c, KVCache) or c.keys is None:
                return [], []
            layers.append((c.keys[..., : c.offset, :], c.values[..., : c.offset, :]))
        return request.all_token_ids[: request.num_computed], layers

    def start_decoding(self, request: Request) -> None:
        if request.grammar is not None:  # replayed: after a preemption the output is not empty
            request.matcher = request.grammar.matcher(request.output_token_ids)
        state = self.sampler.make_row(
            request.params, request.seed, request.prompt_token_ids, request.output_token_ids,
            request.matcher,
        )
        self.batch.join(request, state)
        request.status = RequestStatus.DECODING

    def drop(self, requests: Sequence[Request]) -> None:
        """Free the KV of these requests, wherever it is."""
        self.batch.remove(requests)
        for r in requests:
            r.cache = None

    def decode_step(self):
        if not len(self.batch):
            return []
        return self.batch.step()

    def reset(self) -> None:
        self.batch = DecodeBatch(self.model, self.sampler)
        mx.clear_cache()
