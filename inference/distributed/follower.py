"""A rank other than 0: it waits for rank 0 to load a model, loads its slice of it and runs
rank 0's step plans (inference.distributed.leader_runner) on its own ``ModelRunner`` until rank 0
closes it, then waits for the next load.

    python -m inference.distributed.follower --model-dir DIR [--model-dir DIR ...] [--cache-dir DIR]

started once per rank with ``MLX_HOSTFILE`` and ``MLX_RANK`` set, as ``mlx.launch`` starts
processes (``omlx serve --distributed`` starts them: inference.distributed.group). A load names
a folder directly inside one of the ``--model-dir`` folders (the same layout on every machine),
never a path. ``--cache-dir`` is this rank's SSD tier of the block cache (its own layers'
blocks, inference.distributed.rank_cache; without it, a RAM tier only). Every plan is checked
before it runs (ids, token ids in the vocabulary, counts
within the request); a plan that does not check, or a token that differs from rank 0's, ends
the rank with a message: it cannot stay in step, and rank 0 then sees the group fail.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections import deque
from dataclasses import fields
from pathlib import Path
from typing import Dict, List, Optional

import mlx.core as mx

from inference.engine.engine_cache import block_cache_for
from inference.engine.model_loader import ModelLoadError, load_model
from inference.engine.model_runner import ModelRunner
from inference.engine.request import Request
from inference.engine.sampling_params import SamplingParams

from .plan_channel import GroupLost, PlanChannel, PlanError
from .rank_cache import cut_hit, follower_config
from .rank_stats import OP as FIGURES
from .rank_stats import exchange, own_figures
from .tensor import MODES, part_component, sharder

logger = logging.getLogger("omlx.distributed")

_PARAMS = {f.name for f in fields(SamplingParams)}
MAX_ID = 256
MAX_SALT = 8192


class Follower:
    """Runs step plans. ``requests``: the requests rank 0 sent and has not dropped, by id;
    ``cache``: this rank's block cache (its own layers); ``pending``: the hits agreed on and
    not seeded yet, in lookup order; ``snapshots``: the last prefill's, by request."""

    def __init__(self, loaded, split, channel: PlanChannel, config):
        self.channel = channel
        self.loaded = loaded
        self.split = split  # its LayerSplit or TensorShard
        self.cache = block_cache_for(self.loaded, config, part_component(split), rows=False)
        # As rank 0's: with the block cache, a model with sliding windows takes its snapshots at
        # block boundaries (and before a prompt's last token). Its checks run forward passes:
        # every rank's too.
        block_size = config.cache_block_size if self.cache.wants_kv else None
        self.runner = ModelRunner(self.loaded, block_size)
        self.requests: Dict[str, Request] = {}
        self.pending: deque = deque()
        self.snapshots: dict = {}

    def run(self) -> None:
        """Until rank 0 sends close; the block cache is closed (its blocks written) either way."""
        try:
            self._run()
        finally:
            self.cache.close()

    def _run(self) -> None:
        while True:
            message = self.channel.receive()
            op = message["op"]
            if op == "close":
                getattr(self.cache, "write_down", lambda: 0)()
                self.cache.close()
                self.channel.agree_min(0, watched=False)  # rank 0 waits for every rank's blocks
                return
            if op in ("store", "keep"):
                self._store(op, message)
            elif op == "lookup":
                self._lookup(message)
            elif op == "seed":
                self._seed(message)
            elif op == "prefill":
                self._prefill(message)
            elif op == "decode":
                for request, token, _ in self.runner.decode_step(_bool(message, "ahead")):
                    request.output_token_ids.append(token)
                self.runner.launch()
            elif op == "drop":
                self._drop(message)
            elif op == FIGURES:
                self._figures()
            elif op == "reset":
                self.requests.clear()
                self.runner.reset()
                while self.pending:
                    self.cache.release(self.pending.popleft())
            else:
                raise PlanError(f"{op!r} is not a step plan here")

    def _lookup(self, message: dict) -> None:
        """Look rank 0's hit up here, agree on what every rank holds, keep that for ``seed``."""
        tokens = _tokens(message.get("tokens"), self.loaded.vocab_size)
        salt = _salt(message.get("salt"))
        hit = self.cache.lookup(tokens, len(tokens), salt)
        agreed = self.channel.agree_min(hit.num_tokens if hit is not None else 0)
        hit = cut_hit(self.cache, hit, agreed)
        if hit is not None:
            self.pending.append(hit)

    def _seed(self, message: dict) -> None:
        request_id = _id(message.get("id"))
        if "new" in message:
            self.requests[request_id] = parse_request(request_id, message["new"], self.loaded.vocab_size)
        request = self._known(request_id)
        n = _int(message.get("tokens"), 1, request.num_tokens - 1)
        if not self.pending or self.pending[0].num_tokens != n:
            raise PlanError(f"{request_id}: rank 0 seeds {n} cached tokens, not the hit agreed on here")
        hit = self.pending.popleft()
        self.runner.seed_cache(request, hit.layers, n)
        request.num_computed = n
        self.cache.release(hit)

    def _store(self, op: str, message: dict) -> None:
        """Store what rank 0 stores: tokens [0, end) of a request from the last prefill's
        snapshots, or (keep) a request's caches before they are dropped. Best effort, as on
        rank 0: a block this rank fails to store is a miss on every rank later, not an error."""
        request = self._known(message.get("id"))
        if op == "keep":
            end = self.runner.kv_snapshot(request)
            request.snapshots, snapshots = [], request.snapshots + [end]
            tokens = request.all_token_ids[: end.end] if end is not None else None
        else:
            tokens = request.all_token_ids[: _int(message.get("end"), 1, request.num_computed)]
            snapshots = self.snapshots.get(request)
            if not snapshots:
                raise PlanError(f"{request.request_id}: no prefill to store from")
        if tokens:
            try:
                self.cache.store(tokens, snapshots, request.cache_salt)
            except Exception:
                logger.exception("could not store the KV of %s in the block cache", request.request_id)

    def _prefill(self, message: dict) -> None:
        new = message.get("new")
        if not isinstance(new, dict):
            raise PlanError("prefill: new must be an object")
        for request_id, described in new.items():
            self.requests[_id(request_id)] = parse_request(request_id, described, self.loaded.vocab_size)
        rows = message.get("rows")
        if not isinstance(rows, list) or not rows:
            raise PlanError("prefill: rows must be a list")
        chunks = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 2):
                raise PlanError("prefill: a row is [id, n]")
            request = self._known(row[0])
            n = _int(row[1], 1, request.num_tokens - request.num_computed)
            chunks.append((request, n))
        pass_tokens = _int(message.get("pass_tokens"), 1, 1 << 30)
        self.snapshots = self.runner.prefill(chunks, self._prompts_done, None, None, pass_tokens)

    def _prompts_done(self, snapshots, done) -> None:
        """As rank 0's: sample the first tokens, then store, join or drop as rank 0 says, until
        done."""
        self.snapshots = snapshots
        states = {}
        for request, token, _, state in self.runner.first_tokens(done):
            request.output_token_ids.append(token)
            states[request.request_id] = state
        while True:
            message = self.channel.receive()
            op = message["op"]
            if op == "done":
                return
            if op in ("store", "keep"):
                self._store(op, message)
            elif op == "join":
                request = self._known(message.get("id"))
                token = request.output_token_ids[-1] if request.request_id in states else None
                if token != message.get("token"):
                    raise PlanError(
                        f"{request.request_id}: rank 0 sampled {message.get('token')}, here {token}"
                    )
                self.runner.join(request, states.pop(request.request_id))
            elif op == "drop":
                self._drop(message)
            elif op == FIGURES:
                self._figures()
            else:
                raise PlanError(f"{op!r} is not a step plan inside a prefill")

    def _figures(self) -> None:
        """Rank 0 asks for every rank's figures (inference.distributed.rank_stats)."""
        exchange(self.channel.group, own_figures(self.cache, self.split))

    def _drop(self, message: dict) -> None:
        ids, give_back = parse_drop(message)
        self.runner.drop([self._known(i) for i in ids], give_back)
        for i in ids:
            self.requests.pop(i, None)

    def _known(self, request_id) -> Request:
        request = self.requests.get(request_id) if isinstance(request_id, str) else None
        if request is None:
            raise PlanError(f"no request {str(request_id)[:MAX_ID]!r} here")
        return request


def parse_drop(message: dict) -> tuple:
    """(ids, give_back) of a drop plan: the requests whose rows leave, and whether their memory is
    given back now (``DecodeBatch.remove``). PlanError unless ids is a list, give_back a bool."""
    ids = message.get("ids")
    if not isinstance(ids, list):
        raise PlanError("drop: ids must be a list")
    give_back = message.get("give_back", False)
    if not isinstance(give_back, bool):
        raise PlanError("drop: give_back must be true or false")
    return ids, give_back


def parse_request(request_id: str, described, vocab: int) -> Request:
    """A request as rank 0 describes it (``leader_runner.describe``); PlanError unless every
    field checks: token ids in [0, vocab), known sampling parameters, no structured output."""
    if not isinstance(described, dict):
        raise PlanError("a request must be an object")
    prompt = _tokens(described.get("prompt"), vocab)
    output = _tokens(described.get("output"), vocab, allow_empty=True)
    params = described.get("params")
    if not isinstance(params, dict) or not set(params) <= _PARAMS or params.get("structured"):
        raise PlanError("a request's params must be sampling parameters without structured output")
    try:
        sampling = SamplingParams(**params)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"a request's params: {exc}") from None
    seed = _int(described.get("seed"), 0, (1 << 63) - 1)
    salt = _salt(described.get("salt"))
    request = Request(_id(request_id), prompt, sampling, None, frozenset(), _ignore, seed, cache_salt=salt)
    request.output_token_ids = output
    return request


def _ignore(event) -> None:
    """A follower's requests report nothing: rank 0 serves them."""


def _id(value) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID:
        raise PlanError("a request id must be a string of 1 to 256 characters")
    return value


def _salt(value):
    if value is not None and not (isinstance(value, str) and 0 < len(value) <= MAX_SALT):
        raise PlanError(f"a cache salt must be null or a string of 1 to {MAX_SALT} characters")
    return value


def _int(value, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise PlanError(f"{value!r} is not an integer in [{low}, {high}]")
    return value


def _bool(message: dict, key: str) -> bool:
    value = message.get(key)
    if not isinstance(value, bool):
        raise PlanError(f"{key} must be true or false")
    return value


def _tokens(value, vocab: int, allow_empty: bool = False) -> list:
    if not isinstance(value, list) or not (value or allow_empty):
        raise PlanError("token ids must be a list")
    for t in value:
        _int(t, 0, vocab - 1)
    return value


def serve(model_dirs: List[Path], group, cache_dir: Optional[str] = None) -> None:
    """Load and run what rank 0 says, one model at a time, until rank 0 is gone. Every rank says
    whether it loaded the model (``agree_min``): when one could not, none serves it, and this
    rank waits for the next load."""
    channel = PlanChannel(group)
    while True:
        message = channel.receive()
        if message["op"] != "load":
            raise PlanError(f"{message['op']!r}: no model is loaded here")
        loaded = None
        try:
            loaded, split, config = _load(model_dirs, message, group, cache_dir)
        except (ModelLoadError, PlanError) as exc:
            name = str(message.get("model"))[:MAX_ID]
            print(f"rank {group.rank()}: cannot load {name!r}: {exc}", file=sys.stderr, flush=True)
        # Right after the load, before any forward pass (the runner's checks run some).
        if channel.agree_min(int(loaded is not None), watched=False) and loaded is not None:
            Follower(loaded, split, channel, config).run()
            logger.info("closed %s", loaded.path)


def _load(model_dirs: List[Path], message: dict, group, cache_dir):
    """The model a load names, this rank's split of it and its engine settings."""
    dtype = message.get("dtype")
    if dtype not in (None, "float32", "bfloat16", "float16"):
        raise PlanError(f"dtype {dtype!r}")
    path = find_model(model_dirs, message.get("model"))
    config = follower_config(message.get("cache"), dtype, cache_dir)
    parallel = message.get("parallel", "pipeline")
    if parallel not in MODES:
        raise PlanError(f"parallel {str(parallel)[:MAX_ID]!r}")
    logger.info("loading %s (%s parallel)", path, parallel)
    parts = []
    loaded = load_model(path, dtype, shard=sharder(parallel, group, parts))
    return loaded, parts[0], config


def find_model(model_dirs: List[Path], name) -> Path:
    """The folder ``name`` directly inside one of ``model_dirs``; PlanError when there is none."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise PlanError(f"{str(name)[:MAX_ID]!r} is not a model folder name")
    for folder in model_dirs:
        if (folder / name).is_dir():
            return folder / name
    raise PlanError(f"no model folder {name!r} in {', '.join(map(str, model_dirs))}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference.distributed.follower", description=__doc__)
    parser.add_argument("--model-dir", action="append", required=True, help="where the model folders are")
    parser.add_argument("--cache-dir", help="this rank's SSD tier of the block cache (default: RAM only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    group = mx.distributed.init(strict=True, backend="ring")
    if group.size() < 2 or group.rank() == 0:
        print("a follower runs as rank 1 or above of a distributed group (MLX_RANK, MLX_HOSTFILE)")
        return 2
    logger.info("rank %d of %d (pid %d) waiting for rank 0", group.rank(), group.size(), os.getpid())
    try:
        serve([Path(d) for d in args.model_dir], group, args.cache_dir)
    except (ModelLoadError, PlanError, GroupLost) as exc:
        print(f"rank {group.rank()}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
