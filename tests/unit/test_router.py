"""The routing policy of Redis mode (inference/dispatch/router.py) and the route keys it compares."""

import pytest

from inference.dispatch.route_keys import route_keys
from inference.dispatch.router import Router
from inference.dispatch.worker_summary import WorkerSummary


def chat(*contents, **extra):
    job = {"model": "m", "cache_salt": None, "tools": None, "tool_choice": None, "chat_template_kwargs": {}}
    job.update(extra)
    return route_keys(dict(job, messages=[{"role": "user", "content": c} for c in contents]))


def test_a_longer_conversation_extends_the_key_chain():
    one, two = chat("a"), chat("a", "b")
    assert two[: len(one)] == one and len(two) == 2
    assert chat("a", cache_salt="x")[0] != one[0]  # tenants never share a route either
    assert chat("x", "b")[1] != two[1]


def test_prefix_wins_until_its_worker_is_too_loaded():
    keys = chat("a", "b", "c")
    router = Router("prefix", balance_threshold=2)
    holder = WorkerSummary("w1", keys=keys[:2], running=2)
    idle = WorkerSummary("w2")
    decision = router.choose(keys, {"w1": holder, "w2": idle})
    assert (decision.worker, decision.reason, decision.matched) == ("w1", "prefix", 2)
    holder.waiting = 1  # 3 more requests than w2: over the threshold
    assert router.choose(keys, {"w1": holder, "w2": idle}).reason == "balance"


def test_nobody_holding_anything_spreads_new_conversations():
    router = Router("prefix")
    workers = {"w1": WorkerSummary("w1"), "w2": WorkerSummary("w2")}
    picked = []
    for name in "abcd":
        decision = router.choose(chat(name), workers)
        router.sent(decision.worker, chat(name))
        router.ended(decision.worker)
        picked.append(decision.worker)
    assert sorted(picked) == ["w1", "w1", "w2", "w2"]
    assert router.choose(chat("a", "more"), workers).worker == picked[0]  # it remembers what it sent
    with pytest.raises(ValueError):
        Router("sticky")
