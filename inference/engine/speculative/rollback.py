"""Removing rejected positions from a decode batch's caches, a different number per row.

A verify pass appends each row's input and draft (``width`` positions, the same for every
row) to every layer; afterwards row i keeps ``width - remove[i]`` of them. How each kind of
batch cache gives the rest back:

- **Full attention** (mlx-lm's ``BatchKVCache``, and ``BatchQuantizedKVCache``, the same with
  keys and values held as quantized triples): the caches are left-padded, every row's newest
  position is the last one, so a row cannot simply be shorter at its end. The common part of
  the rollback is a ``trim`` of every row; a row that drops more keeps the difference as masked
  holes (``holes.punch``: no key or value moves) when every layer is full attention (TRIM), or
  is shifted right by the difference (``prepare(right_padding=...)`` + ``finalize()``: a roll
  of the whole batch buffer, and that much more left padding) next to sliding windows, which
  turns its garbage into left padding.
- **Sliding window** (``BatchRotatingKVCache``, window W): the ring is put in temporal order
  before the pass (mlx-lm's mask for several tokens over a rotated ring keeps a position its
  update drops). A pass of several tokens takes the cache's concatenating path, which keeps
  the last W - 1 positions before the new ones, so the cache holds W - 1 + width positions,
  oldest first: nothing of the window was overwritten. The rollback cuts the common part off
  the end of the buffer (``_cut``: the buffer itself, not only its indices, or the next
  one-token step would count the cut positions as the window's newest) and rolls a row that
  drops more right, like full attention; its garbage then lies before its window (at most
  width - 1 - least positions, fewer than the W - 1 + width - least - W the next step drops
  from the front), masked as padding until then. No copy of the window is made.
- **Recurrent state** (``ArraysCache``: Gated DeltaNet, Mamba): a state folds every position in
  and cannot give one back. ``Rollback`` keeps references to every row's state (and, in such a
  model, to the sliding windows' buffers) from before the verify pass (the layers replace their
  state arrays, they do not write into them, so a reference is a snapshot and costs nothing);
  when some row rejected a position, every layer is put back (attention trimmed by ``width``)
  and each row's kept tokens are run again in one right-padded pass (the padding kept out of
  the state by mlx-lm's ``lengths``, as in a batched prefill; a model whose layers do not
  honour it runs one pass per distinct kept length instead). So a verify pass that rejects
  costs a second forward pass of the kept tokens (its logits are never computed: only the
  caches are evaluated); one where every row kept its whole draft costs nothing more. The
  policy times the whole step, so the replay counts in whether speculation pays.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, BatchKVCache, BatchRotatingKVCache, dynamic_roll

from ..cache_io import leaves
from ..quantized_window import BatchQuantizedWindowKV
from .holes import punch

# Full attention: mlx-lm's BatchKVCache and the engine's kinds of it (quantized, holed, and with
# spare rows after a row left: ``batch_leave``).
ROLLABLE = (BatchKVCache,)
TRIM, WINDOW, REPLAY = "trim", "window", "replay"


def rollback_kind(caches, padding_ok: bool = True) -> Optional[str]:
    """How a verify pass over ``caches`` is rolled back: TRIM (every layer full attention),
    WINDOW (full attention and sliding windows), REPLAY (some recurrent state), None: not at all
    (another kind of layer, or recurrent state next to sliding windows in a model that does not
    honour right padding: ``padding_ok``), the batch decodes plainly."""
    if caches is None:
        return None
    kinds = set()
    for c in leaves(caches):
        if isinstance(c, ROLLABLE):
            kinds.add(TRIM)
        elif type(c) in (BatchRotatingKVCache, BatchQuantizedWindowKV):
            kinds.add(WINDOW)
        elif type(c) is ArraysCache:
            kinds.add(REPLAY)
        else:
            return None
    if REPLAY in kinds:
        return REPLAY if padding_ok or WINDOW not in kinds else None
    return WINDOW if WINDOW in kinds else TRIM


def can_roll_back(caches, padding_ok: bool = True) -> bool:
    """Whether a verify pass over ``caches`` can be rolled back (``rollback_kind``)."""
    return rollback_kind(caches, padding_ok) is not None


class Rollback:
    """Made just before a verify pass: what its rollback needs from before the pass."""

    def __init__(self, caches, padding_ok: bool = True):
        """``padding_ok``: whether the model keeps right padding out of its recurrent state in a
        batched pass (``Prefill.together``); if not, a replay runs in segments (``_replay``)."""
        self.caches = caches
        self.padding_ok = padding_ok
        for c in leaves(caches):
            for w in windows(c):
                if w.keys is not None:
                    # The ring in temporal order first: mlx-lm's mask for a pass of several
                    # tokens over a rotated ring does not drop the oldest position its update drops.
                    w._temporal_order()
        self.kind = rollback_kind(caches)
        self.replay = self.kind == REPLAY
        self.saved = None
        if self.replay:
            self.saved = [None if isinstance(c, ROLLABLE) else _state(c) for c in leaves(caches)]

    def apply(
        self,
        remove: Sequence[int],
        rows: Sequence[Sequence[int]],
        forward: Callable[[mx.array], mx.array],
    ) -> None:
        """Drop the newest ``remove[i]`` positions of row i from every layer; ``rows[i]``: the
        tokens row i ran in the pass (its kept ones are the first ``len - remove[i]``),
        ``forward``: the model over the batch's caches (REPLAY runs the kept tokens again)."""
        if not any(remove):
            return
        if self.replay:
            self._replay(remove, rows, forward)
        else:
            roll_back(self.caches, remove, holes=self.kind == TRIM)

    def _replay(self, remove, rows, forward) -> None:
        """Every layer back to before the pass, then each row's kept tokens run again: in one
        right-padded pass, or (``padding_ok`` False) in one pass per distinct kept length,
        shortest first, where rows already done run their input again and are put back after
        (a state selected per row, attention rolled back per row)."""
        width = len(rows[0])
        for c, saved in zip(leaves(self.caches), self.saved):
            if saved is None:
                c.trim(width)
            else:
                _restore(c, saved)
        lengths = [width - r for r in remove]
        if self.padding_ok:
            _padded_pass(self.caches, [list(row[:n]) for row, n in zip(rows, lengths)], forward)
        else:
            self._segments(lengths, rows, forward)
        # Computed now, not with the next step: the step's time (the policy's cost of a verify
        # pass) includes the replay.
        mx.eval([a for c in leaves(self.caches) for a in cache_arrays(c)])

    def _segments(self, lengths, rows, forward) -> None:
        """The kept tokens in one pass per distinct kept length (no padding: see ``_replay``)."""
        start = 0
        for end in sorted(set(lengths)):
            done = [n <= start for n in lengths]
            states = [list(c.cache) if type(c) is ArraysCache else None for c in leaves(self.caches)]
            segment = [[row[0]] * (end - start) if d else list(row[start:end]) for row, d in zip(rows, done)]
            forward(mx.array(segment, dtype=mx.uint32))
            if any(done):
                keep = mx.array(done)
                for c, before in zip(leaves(self.caches), states):
                    if before is not None:
                        c.cache = [_where_rows(keep, old, new) for old, new in zip(before, c.cache)]
                roll_back(self.caches, [end - start if d else 0 for d in done], (ArraysCache,))
            start = end


def _padded_pass(caches, pieces: List[List[int]], forward) -> None:
    """One pass of each row's ``pieces[i]``, right-padded to the longest, the padding kept out
    of every row's caches (mlx-lm's ``prepare``/``finalize``, as a batched prefill)."""
    lengths = [len(p) for p in pieces]
    longest = max(lengths)
    padding = [longest - n for n in lengths]
    if any(padding):
        for c in leaves(caches):
            c.prepare(lengths=lengths, right_padding=padding)
    forward(mx.array([p + [p[0]] * (longest - len(p)) for p in pieces], dtype=mx.uint32))
    if any(padding):
        for c in leaves(caches):
            c.finalize()


def cache_arrays(c) -> list:
    """The arrays a layer's cache holds (to evaluate them)."""
    if type(c) is ArraysCache:
        return [a for a in c.cache if a is not None]
    held = [c.keys, c.values]
    return [a for x in held if x is not None for a in (x if isinstance(x, tuple) else (x,))]


def _where_rows(rows: mx.array, old: mx.array, new: mx.array) -> mx.array:
    """``old`` in the rows where ``rows`` is True, else ``new`` (arrays with rows on axis 0)."""
    return mx.where(rows.reshape((-1,) + (1,) * (new.ndim - 1)), old, new)


def roll_back(caches, remove: Sequence[int], skip: tuple = (), holes: bool = False) -> None:
    """Drop the newest ``remove[i]`` positions of row i from every full-attention and sliding
    layer (see the module docstring); layers of the types in ``skip`` are left alone. ``holes``:
    a full-attention row that drops more keeps the rest as masked holes (``holes.punch``)
    instead of being rolled right."""
    least = min(remove)
    extra = [r - least for r in remove]
    shift = any(extra)
    for c in leaves(caches):
        if isinstance(c, skip):
            continue
        if type(c) in (BatchRotatingKVCache, BatchQuantizedWindowKV):
            for w in windows(c):  # a quantized window's three rings alike
                _cut(w, least)
                if shift:
                    _roll_right(w, extra)
            continue
        if least:
            c.trim(least)
        if shift and holes:
            punch(c, extra)
        elif shift:
            c.prepare(right_padding=extra)
            c.finalize()


def windows(c) -> tuple:
    """The mlx-lm rings of a batch's sliding-window layer: itself, or a quantized window's three
    (``BatchQuantizedWindowKV.parts``); none for any other layer."""
    if type(c) is BatchRotatingKVCache:
        return (c,)
    if type(c) is BatchQuantizedWindowKV:
        return c.parts
    return ()


def _cut(c: BatchRotatingKVCache, n: int) -> None:
    """Remove the newest ``n`` positions of every row of a sliding window that a pass of
    several tokens left in temporal order (``_idx`` its whole buffer)."""
    if c.rotated or c._idx != c.keys.shape[2]:
        raise RuntimeError("a sliding window is rolled back only after a pass of several tokens")
    if n:
        c.trim(n)
        c.keys, c.values = c.keys[..., : c._idx, :], c.values[..., : c._idx, :]


def _roll_right(c: BatchRotatingKVCache, extra: List[int]) -> None:
    shift = mx.array(extra)
    c.keys = dynamic_roll(c.keys, shift[:, None], axis=2)
    c.values = dynamic_roll(c.values, shift[:, None], axis=2)
    c.offset = c.offset - shift
    c.left_padding = c.left_padding + shift


def _state(c) -> tuple:
    """A layer's state as it is now. Its big arrays are replaced by a pass, never written into
    (a pass of several tokens concatenates); index arrays may be updated in place (``-=``),
    so they are copied."""
    if type(c) is ArraysCache:
        return list(c.cache), _copy(c.left_padding), _copy(c.lengths)
    if type(c) is BatchQuantizedWindowKV:
        return tuple(_state(w) for w in c.parts)
    keys, values, offset, left_padding, *rest = c.state  # BatchRotatingKVCache
    return (keys, values, _copy(offset), _copy(left_padding), *rest)


def _copy(a: Optional[mx.array]) -> Optional[mx.array]:
    return None if a is None else mx.array(a)


def _restore(c, saved: tuple) -> None:
    if type(c) is ArraysCache:
        cache, c.left_padding, c.lengths = saved
        c.cache = list(cache)
    elif type(c) is BatchQuantizedWindowKV:
        for w, part in zip(c.parts, saved):
            _restore(w, part)
    else:
        c.state = saved
