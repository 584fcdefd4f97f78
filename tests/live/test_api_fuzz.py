"""Fuzzing a live `omlx serve` (tiny model) from its own OpenAPI schemas (schemathesis) and with a
corpus of malformed bodies: never a 5xx, never a 422, never a hang (every request has a timeout),
every 4xx in the API's JSON envelope with a message, and the server still serves afterwards.

The schema run generates, per operation of `/v1/openapi.json` and `/v1/anthropic/openapi.json`,
bodies that match the schema (positive) and bodies that break it (negative). Half of the cases are
steered towards the engine (see ``steer``), and `max_tokens`-like fields are kept small so each
case generates a few tokens at most. The default run is bounded (a fixed seed and
FUZZ_EXAMPLES cases per operation and mode); the `slow` run takes OMLX_FUZZ_EXAMPLES (default
400) with a random seed, printed. The corpus below extends tests/live/test_api_errors.py (chat and
completions) to the other routes and to the shapes a schema cannot produce: deep nesting, numbers
beyond float and int, bad UTF-8, lone surrogates, truncated JSON, 10 MB strings.
"""

import copy
import json
import os
import random
import shutil
import time
from collections import Counter

import httpx
import pytest

from tests.support.server import ServerProcess

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

SCHEMAS = ["/v1/openapi.json", "/v1/anthropic/openapi.json"]
FUZZ_EXAMPLES = 12
REQUEST_TIMEOUT = 120  # seconds; a request that takes longer is a hang
SMALL_TOKENS = 4
CHAT, COMPLETIONS, RESPONSES = "/v1/chat/completions", "/v1/completions", "/v1/responses"
MESSAGES, COUNT = "/v1/messages", "/v1/messages/count_tokens"
HI = [{"role": "user", "content": "hi"}]
BASE = {
    CHAT: {"model": "tiny", "messages": HI, "max_tokens": 2},
    COMPLETIONS: {"model": "tiny", "prompt": "hi", "max_tokens": 2},
    RESPONSES: {"model": "tiny", "input": "hi", "max_output_tokens": 2},
    MESSAGES: {"model": "tiny", "messages": HI, "max_tokens": 2},
    COUNT: {"model": "tiny", "messages": HI},
}
ROLES = {MESSAGES: ("user", "assistant"), COUNT: ("user", "assistant")}
CHAT_ROLES = ("system", "user", "assistant", "developer")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, model_dir):
    """A server of its own: the fuzzer loads, unloads and re-settings models."""
    models = tmp_path_factory.mktemp("fuzz-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    server = ServerProcess(["--model-dir", str(models)], tmp_path_factory.mktemp("fuzz-home"))
    yield server
    server.stop()


def steer(path: str, body, rng: random.Random):
    """A body likelier to reach the engine: on a generation route, a valid request with one to
    three of the generated fields laid over it (an odd field or two get past the first checks);
    elsewhere the served model. Roles are made known ones."""
    if not isinstance(body, dict):
        return body
    if path in BASE:
        picked = rng.sample(sorted(body), min(len(body), rng.randint(1, 3)))
        body = {**copy.deepcopy(BASE[path]), **{k: body[k] for k in picked}}
    if "model" in body:
        body["model"] = "tiny"
    roles = ROLES.get(path, CHAT_ROLES)
    for key in ("messages", "input"):
        items = body.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and "role" in item:
                    item["role"] = rng.choice(roles)
    return body


def keep_small(body) -> None:
    """Few tokens per case, whatever the schema allows: generation stays fast."""
    if not isinstance(body, dict):
        return
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > SMALL_TOKENS:
            body[key] = SMALL_TOKENS
    for key, most in (("n", 2), ("top_logprobs", 2)):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > most:
            body[key] = most


def check_answer(status: int, text: str, content_type) -> str:
    """'' when the answer is acceptable, else what is wrong with it."""
    if isinstance(content_type, list):  # schemathesis' headers: a list of values per name
        content_type = content_type[0] if content_type else ""
    if status >= 500 or status == 422:
        return f"status {status}: {text[:300]}"
    if status >= 400:
        if not (content_type or "").startswith("application/json"):
            return f"status {status} without a JSON body: {text[:200]!r}"
        try:
            body = json.loads(text)
        except ValueError:
            return f"status {status}, body not JSON: {text[:200]!r}"
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict) or not isinstance(error.get("message"), str) or not error["message"]:
            return f"status {status}, no error message: {text[:200]}"
    return ""


def fuzz_operation(url: str, operation, mode, examples: int, run_seed: int, statuses: Counter) -> list:
    """Run one operation's generated cases; returns the problems found (a curl command each) and
    counts the statuses by operation."""
    problems = []
    path = operation.path
    if not (len(operation.body) or len(operation.path_parameters) or len(operation.query)):
        examples = 1  # nothing to vary: one call

    @seed(run_seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=operation.as_strategy(generation_mode=mode), steered=st.booleans(), pick=st.integers(0, 2**16)
    )
    def run(case, steered, pick):
        if steered:
            case.body = steer(path, case.body, random.Random(pick))
        keep_small(case.body)
        started = time.monotonic()
        try:
            response = case.call(base_url=url, timeout=REQUEST_TIMEOUT)
        except Exception as exc:  # a timeout is a hang; a dropped connection a crash
            problems.append(
                f"{type(exc).__name__} after {time.monotonic() - started:.0f} s: "
                f"{case.as_curl_command()[:2000]}"
            )
            return
        statuses[f"{operation.label} {response.status_code}"] += 1
        wrong = check_answer(response.status_code, response.text, response.headers.get("content-type"))
        if wrong:
            problems.append(f"{wrong}\n  {case.as_curl_command()[:2000]}")

    try:
        run()
    except Unsatisfiable:  # negative mode of an operation with nothing to break (no parameters)
        pass
    return problems


def fuzz_schemas(url: str, examples: int, run_seed: int) -> list:
    from schemathesis import GenerationMode

    problems, operations, statuses = [], 0, Counter()
    for schema_path in SCHEMAS:
        schema = schemathesis.openapi.from_url(url + schema_path, timeout=60)
        for result in schema.get_all_operations():
            operation = result.ok()
            operations += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                problems += [
                    f"{operation.label} ({mode.value}): {p}"
                    for p in fuzz_operation(url, operation, mode, examples, run_seed, statuses)
                ]
    assert operations >= 16, operations  # both schemas were read, every route is in them
    print("\nschema fuzz, answers by operation and status:", json.dumps(dict(sorted(statuses.items()))))
    return problems


def assert_still_serving(url: str) -> None:
    response = httpx.post(
        url + "/v1/completions",
        timeout=REQUEST_TIMEOUT,
        json={"model": "tiny", "prompt": "still there?", "max_tokens": 2},
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 2


def test_schema_fuzz_bounded(fuzz_server):
    problems = fuzz_schemas(fuzz_server.url, FUZZ_EXAMPLES, run_seed=0)
    assert not problems, "\n".join(problems[:20])
    assert_still_serving(fuzz_server.url)


@pytest.mark.slow
def test_schema_fuzz_long(fuzz_server):
    examples = int(os.environ.get("OMLX_FUZZ_EXAMPLES", "400"))
    run_seed = int(os.environ.get("OMLX_FUZZ_SEED", random.randrange(2**32)))
    print(f"\nschema fuzz: {examples} cases per operation and mode, OMLX_FUZZ_SEED={run_seed}")
    problems = fuzz_schemas(fuzz_server.url, examples, run_seed)
    assert not problems, "\n".join(problems[:20])
    assert_still_serving(fuzz_server.url)


# -- the corpus: shapes a schema does not generate --------------------------------------------------

MB10 = 10 * 1024 * 1024


def nested(depth: int, leaf="1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


def raw(route: str, **fields) -> bytes:
    return json.dumps({**BASE[route], **fields}).encode()


def spliced(route: str, field: str, literal: bytes) -> bytes:
    """The route's base body with ``field`` set to a raw JSON literal (what json.dumps cannot write)."""
    return raw(route)[:-1] + b', "' + field.encode() + b'": ' + literal + b"}"


def deep_tool(depth: int) -> bytes:
    schema = json.loads(nested(depth))
    return raw(
        CHAT,
        tools=[
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": schema}}},
            }
        ],
    )


CORPUS = {  # name -> (method, path, body) or a function that makes it (big bodies): a 4xx each
    "deep-array-content": (
        "POST",
        CHAT,
        b'{"model":"tiny","messages":[{"role":"user","content":' + b"[" * 100000 + b"]" * 100000 + b"}]}",
    ),
    "deep-object-field": ("POST", CHAT, spliced(CHAT, "metadata", nested(5000).encode())),
    "deep-900-tool-schema": ("POST", CHAT, deep_tool(900)),  # was a 500 (RecursionError)
    "deep-65-tool-schema": ("POST", CHAT, deep_tool(65)),  # 71 levels
    "deep-900-response-format": (
        "POST",
        CHAT,
        raw(
            CHAT,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": json.loads(nested(900))},
            },
        ),
    ),
    "deep-900-responses-tools": (
        "POST",
        RESPONSES,
        raw(RESPONSES, tools=[{"type": "function", "name": "f", "parameters": json.loads(nested(900))}]),
    ),
    "deep-900-anthropic-tools": (
        "POST",
        MESSAGES,
        raw(MESSAGES, tools=[{"name": "f", "input_schema": json.loads(nested(900))}]),
    ),
    "deep-900-anthropic-metadata": ("POST", MESSAGES, spliced(MESSAGES, "metadata", nested(900).encode())),
    "deep-900-count-tokens": ("POST", COUNT, spliced(COUNT, "system", nested(900).encode())),
    "deep-900-settings": ("PATCH", "/v1/models/tiny/settings", nested(900).encode()),
    "int-5000-digits": ("POST", CHAT, spliced(CHAT, "max_tokens", b"9" * 5000)),
    "float-overflow-temperature": (
        "POST",
        COMPLETIONS,
        spliced(COMPLETIONS, "temperature", b"1e400"),
    ),  # was a 200
    "float-overflow-repetition-penalty": ("POST", CHAT, spliced(CHAT, "repetition_penalty", b"1e400")),
    "int-beyond-float-temperature": ("POST", CHAT, spliced(CHAT, "temperature", b"1" + b"0" * 400)),
    "int-beyond-float-anthropic-top-p": ("POST", MESSAGES, spliced(MESSAGES, "top_p", b"1" + b"0" * 400)),
    "nan-temperature": ("POST", COMPLETIONS, spliced(COMPLETIONS, "temperature", b"NaN")),
    "nan-top-p": ("POST", COMPLETIONS, spliced(COMPLETIONS, "top_p", b"NaN")),
    "infinity-presence": ("POST", COMPLETIONS, spliced(COMPLETIONS, "presence_penalty", b"Infinity")),
    "nan-anthropic-temperature": ("POST", MESSAGES, spliced(MESSAGES, "temperature", b"NaN")),
    "minus-infinity-responses-top-p": ("POST", RESPONSES, spliced(RESPONSES, "top_p", b"-Infinity")),
    "bad-utf8-anthropic": (
        "POST",
        MESSAGES,
        b'{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"\xff"}]}',
    ),
    "bad-utf8-responses": ("POST", RESPONSES, b'{"model":"tiny","input":"\xc3\x28"}'),
    "bad-utf8-count": (
        "POST",
        COUNT,
        b'{"model":"tiny","messages":[{"role":"user","content":"\xed\xa0\x80"}]}',
    ),
    "bad-utf8-settings": ("PATCH", "/v1/models/tiny/settings", b'{"alias":"\xff"}'),
    "surrogate-chat": ("POST", CHAT, raw(CHAT, messages=[{"role": "user", "content": "\ud800 hi"}])),
    "surrogate-completions": ("POST", COMPLETIONS, raw(COMPLETIONS, prompt="\udfff")),
    "surrogate-anthropic": (
        "POST",
        MESSAGES,
        raw(MESSAGES, messages=[{"role": "user", "content": "\ud800"}]),
    ),
    "surrogate-anthropic-system": ("POST", MESSAGES, raw(MESSAGES, system="\udc00")),
    "surrogate-count": ("POST", COUNT, raw(COUNT, messages=[{"role": "user", "content": "\ud800"}])),
    "surrogate-responses": ("POST", RESPONSES, raw(RESPONSES, input="\ud800")),
    "surrogate-responses-instructions": ("POST", RESPONSES, raw(RESPONSES, instructions="\udc00")),
    "surrogate-tool-name": (
        "POST",
        CHAT,
        raw(
            CHAT,
            tools=[{"type": "function", "function": {"name": "\ud800", "parameters": {"type": "object"}}}],
        ),
    ),
    "truncated-anthropic": ("POST", MESSAGES, raw(MESSAGES)[:25]),
    "truncated-responses": ("POST", RESPONSES, raw(RESPONSES)[:17]),
    "truncated-count": ("POST", COUNT, b'{"model'),
    "truncated-settings": ("PATCH", "/v1/models/tiny/settings", b'{"ttl'),
    "array-anthropic": ("POST", MESSAGES, b"[1, 2]"),
    "array-responses": ("POST", RESPONSES, b'[{"model": "tiny"}]'),
    "array-settings": ("PATCH", "/v1/models/tiny/settings", b"[1]"),
    "null-count": ("POST", COUNT, b"null"),
    "empty-responses": ("POST", RESPONSES, b""),
    "empty-anthropic": ("POST", MESSAGES, b""),
    "form-body": ("POST", COMPLETIONS, b"model=tiny&prompt=hi"),
    "many-prompts": lambda: ("POST", COMPLETIONS, raw(COMPLETIONS, prompt=["a"] * 100000)),
    "input-items-limit": ("GET", "/v1/responses/x/input_items?limit=99999999999999999999999", b""),
    "input-items-limit-nan": ("GET", "/v1/responses/x/input_items?limit=NaN", b""),
    "10mb-model": lambda: ("POST", COMPLETIONS, raw(COMPLETIONS, model="m" * MB10)),
    "10mb-key": lambda: ("POST", RESPONSES, json.dumps({"k" * MB10: 1}).encode()),
    "10mb-max-tokens-string": lambda: ("POST", CHAT, raw(CHAT, max_tokens="9" * MB10)),
    # issue 25: 34 s of engine time for a tiny model before the caps (inference/api/common/caps.py)
    "5000-stop-sequences": lambda: ("POST", MESSAGES, raw(MESSAGES, stop_sequences=["s" * 100] * 5000)),
    "1mb-stop-string": lambda: ("POST", COMPLETIONS, raw(COMPLETIONS, stop="s" * 2**20)),
    "100k-messages": lambda: ("POST", MESSAGES, raw(MESSAGES, messages=HI * 100_000)),
}
# Prompts of 10 MB are refused too (over the context), but tokenizing them takes 15-60 s on two
# shared cores, and the other big bodies a few seconds each: in the slow run only.
SLOW_CORPUS = {
    "million-token-ids": lambda: ("POST", COMPLETIONS, raw(COMPLETIONS, prompt=[5] * 1_000_000)),
    "10mb-anthropic-model": lambda: ("POST", MESSAGES, raw(MESSAGES, model="m" * MB10)),
    "10mb-role": lambda: ("POST", CHAT, raw(CHAT, messages=[{"role": "r" * MB10, "content": "x"}])),
    "10mb-anthropic-role": lambda: (
        "POST",
        MESSAGES,
        raw(MESSAGES, messages=[{"role": "r" * MB10, "content": "x"}]),
    ),
    "10mb-tool-choice": lambda: ("POST", CHAT, raw(CHAT, tool_choice="t" * MB10)),
    "10mb-setting": lambda: (
        "PATCH",
        "/v1/models/tiny/settings",
        json.dumps({"ttl_seconds": "1" * MB10}).encode(),
    ),
    "10mb-prompt": lambda: ("POST", COMPLETIONS, raw(COMPLETIONS, prompt="a" * MB10)),
    "10mb-chat": lambda: (
        "POST",
        CHAT,
        raw(CHAT, messages=[{"role": "user", "content": "ab " * (MB10 // 3)}]),
    ),
    "10mb-anthropic": lambda: (
        "POST",
        MESSAGES,
        raw(MESSAGES, messages=[{"role": "user", "content": "x" * MB10}]),
    ),
    "10mb-responses": lambda: ("POST", RESPONSES, raw(RESPONSES, input="y" * MB10)),
    "200k-messages": lambda: ("POST", CHAT, raw(CHAT, messages=HI * 200000)),
}


def send(url: str, method: str, path: str, body: bytes) -> httpx.Response:
    return httpx.request(
        method,
        url + path,
        content=body or None,
        timeout=REQUEST_TIMEOUT,
        headers={"content-type": "application/json"} if body else {},
    )


def check_corpus_case(url, case):
    method, path, body = case() if callable(case) else case
    response = send(url, method, path, body)
    assert 400 <= response.status_code < 500 and response.status_code != 422, (
        path,
        body[:200],
        response.status_code,
        response.text[:300],
    )
    assert check_answer(response.status_code, response.text, response.headers.get("content-type")) == ""
    if path.startswith("/v1/messages"):  # Anthropic's envelope
        assert response.json()["type"] == "error"
    assert_still_serving(url)


@pytest.mark.parametrize("name", list(CORPUS))
def test_malformed_body(fuzz_server, name):
    check_corpus_case(fuzz_server.url, CORPUS[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW_CORPUS))
def test_malformed_body_10mb_prompts(fuzz_server, name):
    check_corpus_case(fuzz_server.url, SLOW_CORPUS[name])


def test_nesting_limit_names_the_limit_and_64_levels_are_served(fuzz_server):
    """The bound of inference/api/common/json_body.py: at the limit served, one level deeper a 400
    that says why."""
    from inference.api.common.json_body import MAX_DEPTH

    # body (1) > tools (2) > tool (3) > function (4) > parameters (5) > properties (6): 6 + depth
    at_limit = send(fuzz_server.url, "POST", CHAT, deep_tool(MAX_DEPTH - 6))
    assert at_limit.status_code == 200, at_limit.text[:300]
    over = send(fuzz_server.url, "POST", CHAT, deep_tool(MAX_DEPTH - 5))
    assert over.status_code == 400
    assert (
        over.json()["error"]["message"]
        == f"The request body nests objects and arrays more than {MAX_DEPTH} levels deep"
    )
    over = send(fuzz_server.url, "POST", MESSAGES, spliced(MESSAGES, "metadata", nested(MAX_DEPTH).encode()))
    assert over.status_code == 400 and "levels deep" in over.json()["error"]["message"]


def test_lone_surrogates_are_a_400_that_says_so(fuzz_server):
    """JSON can escape a lone UTF-16 surrogate; no tokenizer encodes it: refused when parsed, on
    every route (it was a 400 from the tokenizer that blamed the chat template, or a 200 for a
    stop string)."""
    for method, path, body in (
        ("POST", COMPLETIONS, raw(COMPLETIONS, prompt="\udfff")),
        ("POST", CHAT, raw(CHAT, stop=["\ud800"])),
        ("POST", MESSAGES, raw(MESSAGES, system="\udc00")),
        ("POST", RESPONSES, json.dumps({"\ud800": 1, **BASE[RESPONSES]}).encode()),
        ("PATCH", "/v1/models/tiny/settings", json.dumps({"alias": "\ud800"}).encode()),
    ):
        response = send(fuzz_server.url, method, path, body)
        assert response.status_code == 400, (path, response.text[:300])
        assert "lone surrogate" in response.json()["error"]["message"], response.text[:300]


STOP_FIELDS = {  # route -> (the OpenAPI schema, its request schema, the stop field)
    CHAT: ("/v1/openapi.json", "ChatCompletionRequest", "stop"),
    COMPLETIONS: ("/v1/openapi.json", "CompletionRequest", "stop"),
    RESPONSES: ("/v1/openapi.json", "ResponsesRequest", "stop"),
    MESSAGES: ("/v1/anthropic/openapi.json", "MessagesRequest", "stop_sequences"),
}


def test_stop_caps_fuzzed_at_the_bounds_the_schema_states(fuzz_server):
    """The caps on stop strings as /v1/openapi.json states them (the schema run above generates
    from them), fuzzed around the bounds: a 400 that names the cap exactly when a count or a
    length is beyond it, served otherwise (the stops never match: the output stays the same)."""
    for path, (schema_path, name, field) in STOP_FIELDS.items():
        schema = httpx.get(fuzz_server.url + schema_path, timeout=60).json()
        stop = schema["components"]["schemas"][name]["properties"][field]
        most, chars = stop["maxItems"], stop["items"]["maxLength"]
        assert (most, chars) == ((16 if path == MESSAGES else 4), 1000)

        @seed(25)
        @settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(count=st.integers(1, most + 2), length=st.integers(chars - 2, chars + 2))
        def run(count, length):
            strings = ["\x07" * (length if i == count - 1 else 1) for i in range(count)]
            response = send(fuzz_server.url, "POST", path, raw(path, **{field: strings}))
            if count > most or length > chars:
                assert response.status_code == 400, (path, count, length, response.text[:200])
                message = json.loads(response.text)["error"]["message"]
                assert f"at most {most if count > most else chars}" in message, message
            else:
                assert response.status_code == 200, (path, count, length, response.text[:200])

        run()
