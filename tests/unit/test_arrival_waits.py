"""What a request waited for before its first token (benchmarks/arrival_waits.py), on a made-up
run: step records on the server's clock, request rows on the run's, 100 s apart."""

import pytest

from benchmarks.arrival_waits import offset, waits, waits_table


def _step(start, seconds, prompt=0, first=0, prefill=0.0, decode=1, verify=False):
    return dict(
        start=100 + start,
        seconds=seconds,
        prompt_tokens=prompt,
        first_tokens=first,
        prefill_seconds=prefill,
        decode_passes=decode,
        verify=verify,
    )


def _request(sent, ttft):
    return dict(sent_s=sent, ttft_s=ttft, error=None)


RUN = {
    "settings": {"burst": 1},
    "step_trace": [
        _step(0.00, 0.05, prompt=100, first=1, prefill=0.04, decode=0),  # the opening prompt
        _step(0.05, 0.04, verify=True),  # both follow-ups arrive during this verify step
        _step(0.09, 0.10, prompt=80, first=1, prefill=0.08),  # the first one's prompt
        _step(0.19, 0.02),  # a decode step between two prompts
        _step(0.21, 0.10, prompt=80, first=1, prefill=0.08),  # the second one's
    ],
    "requests": [_request(0.0, 0.04), _request(0.07, 0.22), _request(0.06, 0.11)],
}


def test_a_request_behind_another_prompt_is_split_by_the_steps_it_waited_for():
    shift, error = offset(RUN)
    assert shift == pytest.approx(100) and error == pytest.approx(0, abs=1e-9)
    found = waits(RUN)
    # the opening request is left out; both others arrived during the verify step
    assert (found["requests"], found["behind_prompts"]) == (2, 1)
    assert found["arrived_in"] == {"verify only": 2}
    means = found["means_s"]
    assert means["at arrival: verify only"] == pytest.approx((0.02 + 0.03) / 2)
    assert means["others' prompt steps"] == pytest.approx(0.10 / 2)
    assert means["steps between"] == pytest.approx(0.02 / 2)
    assert means["own step"] == pytest.approx(0.08)
    assert means["outside steps"] == pytest.approx(0, abs=1e-9)
    table = waits_table({"lookup": [RUN], "off": [dict(RUN, step_trace=[])]})
    assert "| lookup | 2 | 1 | 2 | 0.0 | 25.0 |" in table and "| off |" not in table
