"""The routing policy of Redis mode (inference/dispatch/router.py) and the route keys it compares:
what a worker saves (the prompt tokens of the prefix it holds) against what waits there."""

import pytest

from inference.dispatch.route_keys import CHARS_PER_TOKEN, Route, route, route_keys
from inference.dispatch.router import SHARED_TIER_DELAY, SHARED_TIER_WEIGHT, Router
from inference.dispatch.worker_summary import WorkerSummary


def job(*contents, **extra):
    out = {"model": "m", "cache_salt": None, "tools": None, "tool_choice": None, "chat_template_kwargs": {}}
    out["params"] = {"max_tokens": 10}
    out.update(extra)
    return dict(out, messages=[{"role": "user", "content": c} for c in contents])


def chat(*contents, **extra):
    return route_keys(job(*contents, **extra))


def test_a_longer_conversation_extends_the_key_chain():
    one, two = chat("a"), chat("a", "b")
    assert two[: len(one)] == one and len(two) == 2
    assert chat("a", cache_salt="x")[0] != one[0]  # tenants never share a route either
    assert chat("x", "b")[1] != two[1]


def test_a_route_estimates_the_tokens_of_each_prefix():
    r = route(job("x" * 400, "y" * 40, n=2))
    assert r.keys == chat("x" * 400, "y" * 40)
    first = r.tokens[0]
    assert 400 // CHARS_PER_TOKEN <= first < 400 // CHARS_PER_TOKEN + 20  # the message's JSON
    assert r.tokens[1] - first >= 40 // CHARS_PER_TOKEN and r.prompt_tokens == r.tokens[1]
    assert r.decode_tokens == 20  # max_tokens x n
    tools = [{"type": "function", "function": {"name": "f", "description": "z" * 800}}]
    assert route(job("x" * 400, tools=tools)).tokens[0] >= first + 200  # tools render before it
    ids = route({"model": "m", "params": {}, "prompts": [list(range(100)), [1, 2]]})
    assert ids.tokens == [64, 100] and ids.prompt_tokens == 102 and ids.decode_tokens == 2 * 256


def fixed(keys, tokens, prompt, decode=0):
    return Route(keys, tokens, prompt, decode)


KEYS = ["k0", "k1", "k2"]


def test_the_holder_wins_until_its_queue_outweighs_twice_the_saving():
    """w1 holds 900 of a 1,000-token prompt; w2 holds nothing. The tokens a worker does not hold
    count twice (this request waits for them, and that worker's later requests wait for the
    compute spent on them): w1 costs its queue + 200, w2 2,000. w1 wins while the work queued
    there is under 1,800 tokens, and loses once over (an overload fallback)."""
    r = fixed(KEYS, [500, 900, 1000], 1000)
    router = Router("prefix", decode_weight=0)
    holder, idle = WorkerSummary("w1", keys=KEYS[:2]), WorkerSummary("w2")
    workers = {"w1": holder, "w2": idle}
    d = router.choose(r, workers)
    assert (d.worker, d.reason, d.matched, d.held, d.work) == ("w1", "prefix", 2, 900, 100)
    busy = router.choose(fixed(["other"], [1750], 1750), {"w1": holder})
    router.sent(busy, fixed(["other"], [1750], 1750))  # 1,750 tokens queued at w1: still cheaper
    assert router.choose(r, workers).worker == "w1"
    second = router.choose(fixed(["more"], [100], 100), {"w1": holder})
    router.sent(second, fixed(["more"], [100], 100))  # 1,850 queued + 200 > 2,000
    d = router.choose(r, workers)
    assert (d.worker, d.reason, d.held, d.work) == ("w2", "balance", 0, 1000)
    router.ended(second)
    assert router.choose(r, workers).worker == "w1"
    assert router.queued() == {"w1": 1750}


def test_tokens_to_generate_count_with_their_weight():
    """Two requests generating 100 tokens each wait at w1: the holder costs 20 + 200 x weight
    + 2 x 100 (what it does not hold), the idle w2 2 x 700. At weight 6 the queue outweighs the
    saving, at weight 5 it does not."""
    r = fixed(KEYS[:1], [600], 700)
    workers = {"w1": WorkerSummary("w1", keys=KEYS[:1]), "w2": WorkerSummary("w2")}
    for weight, expected in ((6, "w2"), (5, "w1")):
        router = Router("prefix", decode_weight=weight)
        for name in "ab":
            small = fixed([name], [10], 10, decode=100)
            router.sent(router.choose(small, {"w1": workers["w1"]}), small)
        assert router.queued() == {"w1": 2 * (10 + weight * 100)}
        assert router.choose(r, workers).worker == expected


def test_a_worker_weighs_its_decode_rows_as_it_measured_them():
    """w1 measured a decode row at 1.5 prompt tokens and published it: its queue counts that per
    token to generate, whatever the setting (weight 6: its queue would outweigh the saving, as
    in the test above); a worker that has not measured it yet is weighed by the setting."""
    r = fixed(KEYS[:1], [600], 700)
    measured = WorkerSummary("w1", keys=KEYS[:1], decode_row_tokens=1.5)
    router = Router("prefix", decode_weight=6)
    for name in "ab":
        small = fixed([name], [10], 10, decode=100)
        router.sent(router.choose(small, {"w1": measured}), small)
    assert router.queued() == {"w1": 2 * (10 + 150)}
    d = router.choose(r, {"w1": measured, "w2": WorkerSummary("w2")})
    assert (d.worker, d.queued) == ("w1", {"w1": 320, "w2": 0})
    router = Router("prefix", decode_weight=6)
    unmeasured = WorkerSummary("w1", keys=KEYS[:1])
    for name in "ab":
        small = fixed([name], [10], 10, decode=100)
        router.sent(router.choose(small, {"w1": unmeasured}), small)
    assert router.choose(r, {"w1": unmeasured, "w2": WorkerSummary("w2")}).worker == "w2"


def test_requests_another_server_sent_count_as_this_one_uncached():
    """w1 reports 2 requests in its engines, and took 2 jobs this server did not send: each weighs
    as much as the routed request with nothing held (500 + 4 x 50), 1,400 in all: with the 100
    tokens it does not hold (x 2), more than w2's 1,000. A summary whose jobs all came from this
    server adds nothing: it lags behind the ends of this server's requests."""
    r = fixed(KEYS[:1], [400], 500, decode=50)
    holder = WorkerSummary("w1", keys=KEYS[:1], running=1, waiting=1, jobs_taken=2)
    idle = WorkerSummary("w2")
    d = Router("prefix", decode_weight=4).choose(r, {"w1": holder, "w2": idle})
    assert (d.worker, d.reason, d.queued) == ("w2", "balance", {"w1": 1400, "w2": 0})
    holder.jobs_taken = 1  # one of them another server's: 700 queued + 200 < 1,000: w1
    d = Router("prefix", decode_weight=4).choose(r, {"w1": holder, "w2": idle})
    assert (d.worker, d.queued["w1"]) == ("w1", 700)
    router = Router("prefix", decode_weight=4)
    for name in "ab":  # this server sent both jobs w1 took; both ended since its last summary
        small = fixed([name], [10], 10)
        done = router.choose(small, {"w1": holder})
        router.sent(done, small)
        router.ended(done)
    d = router.choose(r, {"w1": holder, "w2": idle})
    assert (d.worker, d.reason, d.queued["w1"]) == ("w1", "prefix", 0)


def test_equal_holders_and_empty_caches_go_to_the_least_queued():
    r = fixed(KEYS, [300, 600, 900], 900)
    router = Router("prefix", decode_weight=0)
    both = {"w1": WorkerSummary("w1", keys=KEYS), "w2": WorkerSummary("w2", keys=KEYS)}
    router.sent(router.choose(fixed(["x"], [5], 5), {"w1": both["w1"]}), fixed(["x"], [5], 5))
    d = router.choose(r, both)
    assert (d.worker, d.reason, d.held) == ("w2", "prefix", 900)
    empty = {"w1": WorkerSummary("w1"), "w2": WorkerSummary("w2")}
    d = router.choose(fixed(["new"], [900], 900), empty)
    assert (d.worker, d.reason) == ("w2", "least_loaded")
    busy = WorkerSummary("w1", keys=KEYS, running=1, jobs_taken=1)  # another server's request
    d = Router("least-loaded").choose(r, dict(both, w1=busy))
    assert (d.worker, d.reason) == ("w2", "least_loaded")


def test_an_equal_cost_goes_to_the_worker_holding_most_in_its_own_cache():
    """w1 holds 100 tokens more than w2 and has 200 tokens queued: the same cost (what is not
    held counts twice); w1 wins, a hit in its RAM beats a restore or a recompute. A worker
    holding as much with nothing queued is cheaper."""
    r = fixed(KEYS[:2], [100, 200], 300)
    router = Router("prefix", decode_weight=0)
    w1, w2 = WorkerSummary("w1", keys=KEYS[:2]), WorkerSummary("w2", keys=KEYS[:1])
    queued = fixed(["q"], [0], 200)
    router.sent(router.choose(queued, {"w1": w1}), queued)
    d = router.choose(r, {"w1": w1, "w2": w2})
    assert (d.worker, d.reason, d.held, d.queued) == ("w1", "prefix", 200, {"w1": 200, "w2": 0})
    w3 = WorkerSummary("w3", keys=KEYS[:2])  # as much as w1, nothing queued: cheaper
    assert router.choose(r, {"w1": w1, "w3": w3}).worker == "w3"


def test_a_burst_sharing_a_system_prompt_goes_where_it_is_being_computed():
    """Conversations that share a 1,000-token system prompt arrive at once on three idle workers
    (the agentic load's start). The first goes to an idle worker; the next ones join it (it
    computes the system prompt once for all of them: that prefill is not counted as work they
    wait for) while the work queued there that they do not share (each conversation's own
    message and its 40 tokens to generate) is less than twice the system prompt, which any other
    worker would compute again: the agentic load's four first turns all join it, and only after
    many more does one go elsewhere. Later turns stay on their conversation's worker."""
    system = "s" * (1000 * CHARS_PER_TOKEN)
    router = Router("prefix")
    workers = {w: WorkerSummary(w) for w in ("w1", "w2", "w3")}
    homes = []
    for conv in range(40):  # assign: chosen and counted as sent at once (requests at one instant)
        r = route(job(system, f"conversation {conv:02d} " * 20, params={"max_tokens": 40}))
        d = router.assign(r, workers)
        homes.append(d)
        if d.worker != homes[0].worker:
            break
    first = homes[0].worker
    assert [d.reason for d in homes[:4]] == ["least_loaded", "prefix", "prefix", "prefix"]
    assert len(homes) > 10 and homes[-1].worker != first and homes[-1].reason == "balance"
    own = r.prompt_tokens - r.tokens[0]  # what a conversation does not share (all the same size)
    before, last = homes[-2], homes[-1]  # costs: queued there + 2 x what is not held there
    assert before.queued[first] + 2 * own <= 2 * r.prompt_tokens < last.queued[first] + 2 * own
    for d in homes:
        router.ended(d)
    for conv in range(4):
        r = route(job(system, f"conversation {conv:02d} " * 20, "next turn"))
        d = router.choose(r, workers)
        assert (d.worker, d.reason, d.matched) == (first, "prefix", 2)


TIER = "0123456789abcdef"


def test_a_prefix_on_a_shared_ssd_tier_counts_for_every_worker_sharing_it():
    """A conversation ended on w1; w1 and w2 share an SSD tier, w3 has its own. A new
    conversation with the same system prompt: w1 holds it, w2 can restore it from the shared
    tier (counted at half: a restore is cheaper than a prefill, not free), w3 would compute it.
    With 800 tokens queued at w1, w2 is cheapest; without the shared tier, w1 still is. A prefix
    still in flight, or ended too recently to be written down, counts for no other worker."""
    now = [0.0]
    system = "s" * (1000 * CHARS_PER_TOKEN)
    first, second = route(job(system, "a" * 400)), route(job(system, "b" * 400))
    for tier, expected in ((TIER, "w2"), ("", "w1")):
        workers = {w: WorkerSummary(w, cold_tier=tier) for w in ("w1", "w2")}
        workers["w3"] = WorkerSummary("w3", cold_tier="fedcba9876543210")
        router = Router("prefix", decode_weight=0, clock=lambda: now[0])
        big = fixed(["big"], [5000], 5000)
        held_up = router.choose(big, {"w1": workers["w1"]})
        router.sent(held_up, big)
        d = router.choose(first, {"w1": workers["w1"]})
        router.sent(d, first)
        assert router.choose(second, workers).held == 0  # in flight: not stored yet
        router.ended(d)
        assert router.choose(second, workers).held == 0  # not written down yet
        now[0] += SHARED_TIER_DELAY
        router.ended(held_up)
        busy = fixed(["busy"], [800], 800)
        router.sent(router.choose(busy, {"w1": workers["w1"]}), busy)
        d = router.choose(second, workers)
        assert d.worker == expected, d
    system_tokens = second.tokens[0]
    assert (d.matched, d.held) == (1, system_tokens) and expected == "w1"
    router = Router("prefix", decode_weight=0, clock=lambda: now[0])
    workers = {w: WorkerSummary(w, cold_tier=TIER) for w in ("w1", "w2")}
    d = router.choose(first, {"w1": workers["w1"]})
    router.sent(d, first)
    router.ended(d)
    now[0] += SHARED_TIER_DELAY
    again = router.choose(first, {"w1": workers["w1"]})  # the system prompt's blocks are written
    router.sent(again, first)
    router.ended(again)  # a later end of the same prefix does not make it new again
    router.sent(router.choose(busy, {"w1": workers["w1"]}), busy)
    d = router.choose(second, workers)
    assert (d.worker, d.reason, d.matched, d.held) == (
        "w2",
        "prefix",
        1,
        round(SHARED_TIER_WEIGHT * system_tokens),
    )
    assert d.work == second.prompt_tokens - d.held


def test_a_summary_names_its_ssd_tier_and_decode_row_cost_or_none():
    from inference.dispatch.signed_json import ForgedMessage
    from inference.dispatch.worker_summary import decode, encode

    summary = WorkerSummary("w1", keys=KEYS_HEX, cold_tier=TIER, decode_row_tokens=1.25)
    assert decode("w1", encode(summary, SECRET), SECRET) == summary
    older = encode(WorkerSummary("w1"), SECRET)  # a worker of before the fields: no tier
    assert decode("w1", older, SECRET).cold_tier == ""
    assert decode("w1", older, SECRET).decode_row_tokens == 0.0  # not measured: the setting
    for bad in (-1.0, 1e9, True, "2"):
        forged = encode(WorkerSummary("w1", decode_row_tokens=bad), SECRET)
        with pytest.raises(ForgedMessage, match="decode_row_tokens"):
            decode("w1", forged, SECRET)
    for bad in ("../x", "0123", 7):
        forged = encode(WorkerSummary("w1", cold_tier=bad), SECRET)
        with pytest.raises(ForgedMessage, match="cold_tier"):
            decode("w1", forged, SECRET)


SECRET = "router-test-secret-0123456789abc"
KEYS_HEX = ["00112233445566ff"]


def test_workers_of_one_folder_read_one_tier_id(tmp_path):
    from inference.dispatch.cold_tier_id import FILE, tier_id

    shared = tmp_path / "shared"
    first = tier_id(shared)
    assert len(first) == 16 and tier_id(shared) == first == (shared / FILE).read_text().strip()
    assert tier_id(tmp_path / "other") not in ("", first)
    assert tier_id(None) == ""
    (tmp_path / "file").write_text("not a folder")
    assert tier_id(tmp_path / "file") == ""  # unusable: this worker shares nothing
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / FILE).write_text("garbage")
    assert tier_id(tmp_path / "odd") == ""


def test_nobody_holding_anything_spreads_new_conversations():
    router = Router("prefix")
    workers = {"w1": WorkerSummary("w1"), "w2": WorkerSummary("w2")}
    picked = []
    for name in "abcd":
        r = route(job(name))
        decision = router.choose(r, workers)
        router.sent(decision, r)
        router.ended(decision)
        picked.append(decision.worker)
    assert sorted(picked) == ["w1", "w1", "w2", "w2"]
    assert router.choose(route(job("a", "more")), workers).worker == picked[0]  # it remembers what it sent
    with pytest.raises(ValueError):
        Router("sticky")
    with pytest.raises(ValueError):
        Router("prefix", decode_weight=-1)
