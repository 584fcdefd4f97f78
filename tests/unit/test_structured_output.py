"""Structured output on a tiny random model: whatever the weights, the engine samples only
what the grammar allows, so every finished output is JSON that validates against its schema.

Strings in the schemas carry maxLength and integers bounds: a random model has no reason to end a
string or a number, and
an unbounded one runs to max_tokens (an honest "length" finish, but nothing to validate).
"""

import json

import jsonschema
import pytest

from inference.engine import LLM, SamplingParams
from inference.engine.grammar import GrammarCompiler, compiler_for

GREEDY = dict(temperature=0, ignore_eos=True)
PROMPTS = ["Give me JSON", "Another question entirely", "x"]


def _str(n=12):
    return {"type": "string", "maxLength": n}


SCHEMAS = {
    "enum": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
        "required": ["color", "ok"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "name": _str(),
            "address": {
                "type": "object",
                "properties": {"street": _str(), "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": _str(8), "minItems": 1, "maxItems": 4},
            "points": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "integer", "minimum": -99, "maximum": 99},
                        "y": {"type": "integer", "minimum": -99, "maximum": 99},
                    },
                    "required": ["x", "y"],
                    "additionalProperties": False,
                },
                "maxItems": 3,
            },
        },
        "required": ["tags", "points"],
        "additionalProperties": False,
    },
    "numbers": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "score": {"type": "number", "minimum": -1, "maximum": 1},
            "count": {"type": "integer", "exclusiveMinimum": 10, "maximum": 99},
        },
        "required": ["age", "score", "count"],
        "additionalProperties": False,
    },
    "defs": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 9}, "label": _str(6)},
                "required": ["id", "label"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {
            "root": {"$ref": "#/$defs/node"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
        },
        "required": ["root", "children"],
        "additionalProperties": False,
    },
    "top_level_array": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 2, "maxItems": 5},
}

# Contract 3's tool call object: anyOf over the allowed tools, arguments per tool's parameters.
TOOLS = [
    (
        "get_weather",
        {
            "type": "object",
            "properties": {"city": _str(), "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    ),
    (
        "add",
        {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": 0, "maximum": 1000},
                "b": {"type": "integer", "minimum": 0, "maximum": 1000},
            },
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    ),
]
SCHEMAS["tool_call"] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": params},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, params in TOOLS
    ]
}


@pytest.fixture(scope="module")
def path(model_dir):
    return model_dir(arch="qwen2", preset="tiny")


@pytest.fixture(scope="module")
def llm(path):
    with LLM(path, max_concurrent_requests=8) as llm:
        yield llm


def _schema(name):
    return {"type": "json_schema", "schema": SCHEMAS[name]}


def _valid(result, schema):
    assert result.finish_reason == "stop", (result.finish_reason, result.text)
    value = json.loads(result.text)
    jsonschema.validate(value, schema)
    return value


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_greedy_outputs_validate(llm, name):
    results = llm.generate(PROMPTS, SamplingParams(max_tokens=300, structured=_schema(name), **GREEDY))
    for r in results:
        _valid(r, SCHEMAS[name])


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_sampled_outputs_validate(llm, name):
    params = [
        SamplingParams(max_tokens=300, temperature=1.0, seed=seed, structured=_schema(name))
        for seed in range(4)
    ]
    results = llm.generate([PROMPTS[0]] * 4, params)
    for r in results:
        _valid(r, SCHEMAS[name])
    if name in ("nested", "arrays"):  # room for choice: seeds must matter
        assert len({r.text for r in results}) > 1


def test_tool_call_picks_one_tool_with_its_arguments(llm):
    results = llm.generate(PROMPTS, SamplingParams(max_tokens=300, structured=_schema("tool_call"), **GREEDY))
    tools = dict(TOOLS)
    for r in results:
        call = _valid(r, SCHEMAS["tool_call"])
        assert set(call) == {"name", "arguments"}
        jsonschema.validate(call["arguments"], tools[call["name"]])


def test_json_object(llm):
    greedy = llm.generate(
        PROMPTS, SamplingParams(max_tokens=200, structured={"type": "json_object"}, **GREEDY)
    )
    sampled = llm.generate(
        [PROMPTS[0]] * 4,
        [
            SamplingParams(max_tokens=200, temperature=1.0, seed=seed, structured={"type": "json_object"})
            for seed in range(4)
        ],
    )
    for r in greedy + sampled:
        # an open string may run to max_tokens; whatever ends by itself is a JSON object
        assert r.text.startswith("{")
        if r.finish_reason == "stop":
            assert isinstance(json.loads(r.text), dict)
        else:
            assert r.finish_reason == "length" and len(r.token_ids) == 200
    assert any(r.finish_reason == "stop" for r in greedy)


def test_unconstrained_rows_unchanged_in_a_mixed_batch(llm):
    plain = SamplingParams(max_tokens=20, **GREEDY)
    alone = [llm.generate([p], plain)[0] for p in PROMPTS]
    sampled = SamplingParams(max_tokens=20, temperature=1.0, seed=7)
    sampled_alone = llm.generate([PROMPTS[1]], sampled)[0]
    mixed = llm.generate(
        PROMPTS + PROMPTS + [PROMPTS[1]],
        [plain] * 3
        + [
            SamplingParams(max_tokens=300, structured=_schema(n), **GREEDY)
            for n in ("enum", "nested", "tool_call")
        ]
        + [sampled],
    )
    assert [r.token_ids for r in mixed[:3]] == [r.token_ids for r in alone]
    assert mixed[6].token_ids == sampled_alone.token_ids
    for r, n in zip(mixed[3:6], ("enum", "nested", "tool_call")):
        _valid(r, SCHEMAS[n])


def test_structured_output_is_the_same_alone_and_in_a_batch(llm):
    params = SamplingParams(max_tokens=300, temperature=1.0, seed=3, structured=_schema("arrays"))
    alone = llm.generate([PROMPTS[2]], params)[0]
    batch = llm.generate([PROMPTS[0], PROMPTS[2]], [SamplingParams(max_tokens=40, **GREEDY), params])
    assert batch[1].token_ids == alone.token_ids


def test_structured_output_survives_preemption(path, llm):
    names = ["nested", "arrays", "defs", "tool_call"]
    params = [
        SamplingParams(max_tokens=300, temperature=1.0, seed=i, structured=_schema(n))
        for i, n in enumerate(names)
    ]
    reference = llm.generate(PROMPTS[:1] * 4, params)
    with LLM(path, max_kv_tokens=160, max_concurrent_requests=4) as tight:
        results = tight.generate(PROMPTS[:1] * 4, params)
        assert tight.engine.scheduler.num_preemptions > 0
    for r, ref, n in zip(results, reference, names):
        _valid(r, SCHEMAS[n])
        assert r.token_ids == ref.token_ids


def test_max_tokens_cuts_the_json(llm):
    r = llm.generate([PROMPTS[0]], SamplingParams(max_tokens=4, structured=_schema("nested"), **GREEDY))[0]
    assert r.finish_reason == "length" and len(r.token_ids) == 4
    assert r.text.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.text)


def test_grammar_decides_eos_and_logprobs_still_work(llm):
    # ignore_eos is moot: the output ends where the grammar does, without an EOS token
    for ignore_eos in (False, True):
        r = llm.generate(
            [PROMPTS[0]],
            SamplingParams(
                max_tokens=300, temperature=0, ignore_eos=ignore_eos, logprobs=2, structured=_schema("enum")
            ),
        )[0]
        _valid(r, SCHEMAS["enum"])
        assert not set(r.token_ids) & set(llm.tokenizer.eos_token_ids)
        assert r.text == llm.tokenizer.decode(r.token_ids)
        assert len(r.logprobs) == len(r.token_ids)


def test_stop_string_still_applies(llm):
    full = llm.generate([PROMPTS[0]], SamplingParams(max_tokens=300, structured=_schema("enum"), **GREEDY))[0]
    r = llm.generate(
        [PROMPTS[0]], SamplingParams(max_tokens=300, stop='"ok"', structured=_schema("enum"), **GREEDY)
    )[0]
    assert r.finish_reason == "stop" and full.text.startswith(r.text) and '"ok"' not in r.text


@pytest.mark.parametrize(
    "value, why",
    [
        ("json", "must be"),
        ({"type": "xml"}, "'type' must be"),
        ({"type": "json_schema"}, "needs a 'schema'"),
        ({"type": "json_schema", "schema": "{}"}, "needs a 'schema'"),
        ({"type": "json_object", "strict": True}, "unknown keys"),
        ({"type": "json_schema", "schema": {"type": "foo"}}, "invalid JSON schema"),
        ({"type": "json_schema", "schema": {"$ref": "#/$defs/missing"}}, "invalid JSON schema"),
        ({"type": "json_schema", "schema": {"type": "string", "pattern": "[a-"}}, "invalid JSON schema"),
        ({"type": "json_schema", "schema": {"type": "number", "minimum": float("nan")}}, "not JSON"),
        (
            {"type": "json_schema", "schema": {"type": "integer", "minimum": 5, "maximum": 1}},
            "invalid JSON schema",
        ),
        ({"type": "json_schema", "schema": {"type": "array", "uniqueItems": True}}, "Unimplemented keys"),
    ],
)
def test_invalid_structured_values(value, why):
    with pytest.raises(ValueError, match=r"^structured=") as err:
        SamplingParams(structured=value)
    assert why in str(err.value)


def test_compiled_once_per_schema_and_lru(llm):
    compiler = compiler_for(llm.tokenizer, llm.engine.loaded.vocab_size)
    assert compiler is compiler_for(llm.tokenizer, llm.engine.loaded.vocab_size)
    a, b = _schema("enum"), json.loads(json.dumps(_schema("enum")))
    assert compiler.compile(a) is compiler.compile(b)
    small = GrammarCompiler(
        llm.tokenizer._tokenizer, llm.engine.loaded.vocab_size, llm.tokenizer.eos_token_ids, capacity=2
    )
    first = small.compile(_schema("enum"))
    small.compile(_schema("nested"))
    assert small.compile(_schema("enum")) is first  # used again: stays
    small.compile(_schema("arrays"))  # evicts "nested", the least recently used
    assert len(small) == 2 and small.compile(_schema("enum")) is first


def test_matcher_replays_output_tokens(llm):
    grammar = compiler_for(llm.tokenizer, llm.engine.loaded.vocab_size).compile(_schema("enum"))
    r = llm.generate([PROMPTS[0]], SamplingParams(max_tokens=300, structured=_schema("enum"), **GREEDY))[0]
    assert not grammar.matcher(r.token_ids[:-1]).finished
    assert grammar.matcher(r.token_ids).finished
