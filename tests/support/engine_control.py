"""Holding a real engine's thread from a test, so that requests submitted meanwhile reach its
scheduler in one go (an order of events, not a race with the engine)."""

import threading


def hold(engine):
    """Block the engine thread until the returned event is set."""
    release, held = threading.Event(), threading.Event()

    def block(e):
        held.set()
        release.wait(30)

    threading.Thread(target=engine.call, args=(block,), daemon=True).start()
    assert held.wait(30)
    return release
