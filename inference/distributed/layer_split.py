"""Which decoder layers a rank runs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerSplit:
    """Rank ``rank`` of ``size`` runs layers ``start`` (inclusive) to ``end`` (exclusive) of
    ``num_layers``. Invariant: the splits of ranks 0 .. size-1 are contiguous, in rank order, each
    at least one layer, and together cover every layer once."""

    rank: int
    size: int
    start: int
    end: int
    num_layers: int

    @property
    def first(self) -> bool:
        """Whether this rank embeds the tokens that the pipeline runs on."""
        return self.rank == 0

    @property
    def last(self) -> bool:
        """Whether this rank's output is the model's final hidden state."""
        return self.rank == self.size - 1


def even_split(num_layers: int, size: int, rank: int) -> LayerSplit:
    """An even split, the first ranks taking one more layer when the layers do not divide evenly
    (rank 0 also serves the API, but it is the one that samples either way). ValueError when there
    are fewer layers than ranks."""
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a group of {size}")
    if num_layers < size:
        raise ValueError(f"{num_layers} layers cannot be split across {size} ranks")
    base, extra = divmod(num_layers, size)
    start = rank * base + min(rank, extra)
    end = start + base + (1 if rank < extra else 0)
    return LayerSplit(rank, size, start, end, num_layers)
