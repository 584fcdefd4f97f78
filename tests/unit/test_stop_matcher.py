"""Stop strings in the text stream (inference/engine/stop_matcher.py, text_stream.py): the same
deltas as the plain definition, whatever the split points, and each character read once."""

import random

from inference.engine.stop_matcher import StopMatcher
from inference.engine.text_stream import TextStream


class Pieces:
    """A detokenizer whose tokens are pieces of text; ``text`` records which characters the
    stream reads (the slices it takes of it)."""

    def __init__(self):
        self.whole = ""
        self.read = 0

    def add_token(self, piece):
        self.whole += piece

    def finalize(self):
        pass

    @property
    def text(self):
        return _Counted(self.whole, self)


class _Counted(str):
    """A text that counts the characters its readers scan (slices, iteration, searches)."""

    def __new__(cls, value, owner):
        text = super().__new__(cls, value)
        text.owner = owner
        return text

    def __getitem__(self, key):
        part = str.__getitem__(self, key)
        self.owner.read += len(part)
        return part

    def __iter__(self):
        self.owner.read += len(self)
        return str.__iter__(self)

    def find(self, sub, start=0, *end):
        self.owner.read += len(self) - max(0, start)
        return str.find(self, sub, start, *end)

    def endswith(self, suffix, *more):
        self.owner.read += len(suffix)
        return str.endswith(self, suffix, *more)


def reference(stops, pieces, include):
    """The definition: after each piece, the earliest stop string in the whole text ends it
    (the shorter at a tie); otherwise everything but the longest end that begins a stop string
    is visible. Returns the (delta, stopped) of each piece and of the flush."""
    out, text, emitted = [], "", 0
    for i, piece in enumerate(pieces + [None]):
        final = piece is None
        text += piece or ""
        hits = [(text.find(s), len(s)) for s in stops if s in text]
        if hits:
            start, length = min(hits)
            end = start + (length if include else 0)
        else:
            held = max((n for s in stops for n in range(1, len(s)) if text.endswith(s[:n])), default=0)
            end = len(text) - (0 if final else held)
        out.append((text[emitted:end] if end > emitted else "", bool(hits)))
        emitted = max(emitted, end)
        if hits:
            return out + [("", True)] * (len(pieces) - i)
    return out


def stream(stops, pieces, include):
    detok = Pieces()
    text = TextStream(detok, stops, include)
    out = [text.add(piece) for piece in pieces]
    return out + [(text.flush(), text.stopped)], detok


def test_deltas_match_the_definition_for_any_split():
    rng = random.Random(0)
    for trial in range(3000):
        alphabet = "ab" if trial % 2 else "abc "
        stops = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 4))
        ]
        pieces = [
            "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5))) for _ in range(rng.randint(1, 9))
        ]
        include = rng.random() < 0.5
        got, _ = stream(stops, pieces, include)
        assert got == reference(stops, pieces, include), (stops, pieces, include)


def test_each_character_is_read_once():
    """Linear in the output: the stream reads each new character of the text once, however long
    the stop strings (a check that rescans the text, or a window of the stops' length after
    each token, reads each character hundreds of times)."""
    stops = ["x" * 999 + "y", "ab" * 500]
    pieces = ["x" * 3, "ab", "x"] * 700
    got, detok = stream(stops, pieces, include=False)
    assert not any(stopped for _, stopped in got)
    assert "".join(delta for delta, _ in got) == "".join(pieces)
    assert detok.read <= 2 * len(detok.whole)  # the new characters, and the deltas handed out


def test_held_back_text_is_the_longest_end_that_starts_a_stop():
    matcher = StopMatcher(["hello world", "low"])
    assert matcher.feed("say hel") is None and matcher.pending == 3
    assert matcher.feed("lo wor") is None and matcher.pending == 9
    assert matcher.feed("m") is None and matcher.pending == 0
    assert matcher.feed(" slow") == (len("say hello worm s"), 3)


def test_the_earliest_start_wins_in_one_piece():
    matcher = StopMatcher(["bc", "abcd", "abc"])
    assert matcher.feed("xabcd") == (1, 3)  # "abc" starts first and ends before "abcd"
    assert StopMatcher(["bc", "abcd"]).feed("xabcd") == (1, 4)
