"""Streaming clients for the live, load and soak tests (tests/soak/test_load.py, tests/live/test_soak.py):
a chat completion streamed to its end and checked chunk by chunk, or left part way; an endless
completion left after its first chunk."""

import json
import time

import httpx

MAX_TOKENS = 24


def chat_body(prompt, max_tokens=MAX_TOKENS, include_usage=False, **extra) -> dict:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        **extra,
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


def data_chunks(response):
    """The JSON chunks of an SSE response, then None for ``[DONE]``; asserts every line is
    well-formed (``data: ...``, keep-alive comments, nothing after ``[DONE]``, no error)."""
    assert response.status_code == 200, response.read()
    assert response.headers["content-type"].startswith("text/event-stream")
    done = False
    for line in response.iter_lines():
        if not line or line.startswith(":"):
            continue
        assert line.startswith("data: "), line
        assert not done, "data after [DONE]"
        payload = line[6:]
        if payload == "[DONE]":
            done = True
            yield None
            continue
        chunk = json.loads(payload)
        assert "error" not in chunk, chunk
        yield chunk
    assert done, "no [DONE]"


def stream_once(client, url, prompt, include_usage, max_tokens=MAX_TOKENS):
    """One streamed chat completion, checked chunk by chunk. Returns (text, ttft, usage)."""
    start = time.perf_counter()
    ttft = None
    chunks = []
    body = chat_body(prompt, max_tokens, include_usage)
    with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        for chunk in data_chunks(response):
            if chunk is None:
                continue
            if ttft is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                ttft = time.perf_counter() - start
            chunks.append(chunk)
    assert chunks and chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert len({c["id"] for c in chunks}) == 1
    choice_chunks = [c for c in chunks if c["choices"]]
    assert all(c["choices"][0]["finish_reason"] is None for c in choice_chunks[:-1])
    assert choice_chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in choice_chunks)
    usage = None
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1
        usage = chunks[-1]["usage"]
    else:
        assert all(c.get("usage") is None for c in chunks)
    return text, ttft, usage


def stream_then_leave(client, url, prompt, after_chunks, max_tokens):
    """Start a long streamed completion and close the connection after ``after_chunks`` chunks,
    each checked as it came (the server must abort the request and free its KV). Returns the
    completion's id."""
    body = chat_body(prompt, max_tokens, ignore_eos=True)
    seen = 0
    ids = set()
    with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        for line in lines:
            if not line or line.startswith(":"):
                continue
            assert line.startswith("data: ") and line != "data: [DONE]", line
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            ids.add(chunk["id"])
            seen += 1
            if seen >= after_chunks:
                break
    # Leaving the block closes the connection mid-stream.
    assert len(ids) == 1, ids
    return ids.pop()


def leave_endless_stream(url) -> str:
    """Start a streamed completion of the "tiny" model at ``url`` that would never end and close
    the connection after its first chunk (the server must abort the request). Returns its id."""
    body = {
        "model": "tiny",
        "prompt": "Go on forever",
        "max_tokens": 100000,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        return json.loads(first[6:])["id"]
