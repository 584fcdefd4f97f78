"""Tool results fed back through every API reach each family's template: a live `omlx serve` with
one test model per family of ``tests.support.tool_family_templates`` (a qwen2 test model whose
tokenizer carries the family's template), driven by the official openai and anthropic SDKs in
strict mode. The prompt the server computes must be exactly the family's rendering of the
conversation, tool call and tool result included (same token count as rendering it here).
Also the ``tool_parser`` setting through GET / PATCH /v1/models/{id}/settings."""

import json
import shutil

import httpx
import pytest
from transformers import AutoTokenizer

from inference.chat.template import template_messages
from tests.support.sdk_clients import anthropic_client, openai_client
from tests.support.server import ServerProcess
from tests.support.tool_family_templates import CHAT_TEMPLATES

FAMILIES = tuple(CHAT_TEMPLATES)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather of a city", "parameters": SCHEMA},
    }
]
CALL_ID = "call_0123456789abcdef01234567"
ROUND = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": CALL_ID,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": CALL_ID, "content": "Sunny, 21 C"},
]
# How each family's template shows the tool result (tests/unit/test_tool_formats.py checks more).
RESULT_MARKUP = {
    "qwen3_xml": "<tool_response>\nSunny, 21 C\n</tool_response>",
    "glm45": "<|observation|>",
    "kimi_k2": "## Return of functions.get_weather:0\nSunny, 21 C",
    "deepseek_v3": "<｜tool▁output▁begin｜>Sunny, 21 C",
    "gemma3": "```tool_output\nSunny, 21 C\n```",
    "gemma4": '<|tool_response>response:get_weather{value:<|"|>Sunny, 21 C',
    "harmony": (
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>Sunny, 21 C<|end|>"
    ),
}


def family_model(source, dest, family):
    """A copy of the test model at ``source`` whose chat template is ``family``'s."""
    shutil.copytree(source, dest)
    config = json.loads((dest / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATES[family]
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return dest


@pytest.fixture(scope="module")
def models(tmp_path_factory, model_dir):
    root = tmp_path_factory.mktemp("family-models")
    return {family: family_model(model_dir("qwen2", "tiny"), root / family, family) for family in FAMILIES}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    root = next(iter(models.values())).parent
    process = ServerProcess(["--model-dir", str(root)], tmp_path_factory.mktemp("omlx-home-families"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai_client(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def claude(server):
    with anthropic_client(server.url) as c:
        yield c


def expected_tokens(models, family, messages, tools=TOOLS):
    """The token count of the family's rendering of ``messages`` (the generation prompt included)."""
    tokenizer = AutoTokenizer.from_pretrained(models[family])
    # enable_thinking=False: mlx-lm's tokenizer wrapper sets it from the vocabulary, which has no
    # <think> token here.
    text = tokenizer.apply_chat_template(
        template_messages(messages),
        tools=tools,
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert RESULT_MARKUP[family] in text
    return len(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_completions_feed_the_tool_result_through_the_template(client, models, family):
    reply = client.chat.completions.create(
        model=family, messages=ROUND, tools=TOOLS, temperature=0, max_tokens=3
    )
    assert reply.usage.prompt_tokens == expected_tokens(models, family, ROUND)
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    stream = list(
        client.chat.completions.create(
            model=family, messages=ROUND, tools=TOOLS, temperature=0, max_tokens=3, stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == (
        choice.message.content or ""
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_anthropic_messages_feed_the_tool_result_through_the_template(claude, models, family):
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": CALL_ID, "name": "get_weather", "input": {"city": "Paris"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": CALL_ID,
                    "content": [{"type": "text", "text": "Sunny, 21 C"}],
                }
            ],
        },
    ]
    tools = [{"name": "get_weather", "description": "Weather of a city", "input_schema": SCHEMA}]
    expected = expected_tokens(models, family, ROUND)
    assert claude.messages.count_tokens(model=family, messages=messages, tools=tools).input_tokens == expected
    message = claude.messages.create(model=family, max_tokens=3, messages=messages, tools=tools)
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens == expected


@pytest.mark.parametrize("family", ["harmony", "kimi_k2", "gemma4"])
def test_responses_feed_the_tool_result_through_the_template(client, models, family):
    response = client.responses.create(
        model=family,
        max_output_tokens=3,
        temperature=0,
        store=False,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "type": "function_call",
                "call_id": CALL_ID,
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": CALL_ID, "output": "Sunny, 21 C"},
        ],
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": SCHEMA,
            }
        ],
    )
    assert response.usage.input_tokens == expected_tokens(
        models, family, [ROUND[0], dict(ROUND[1], content=""), ROUND[2]]
    )


def test_tool_parser_setting_through_the_api(server, client):
    url = server.url + "/v1/models/harmony/settings"
    assert httpx.get(url).json()["tool_parser"] is None  # detected
    assert httpx.patch(url, json={"tool_parser": "glm45"}).json()["tool_parser"] == "glm45"
    assert httpx.get(url).json()["tool_parser"] == "glm45"
    reply = client.chat.completions.create(model="harmony", messages=ROUND, tools=TOOLS, max_tokens=2)
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    bad = httpx.patch(url, json={"tool_parser": "glm5"})
    assert bad.status_code == 400 and "tool_parser" in bad.text
    assert httpx.patch(url, json={"tool_parser": 3}).status_code == 400
    assert httpx.get(url).json()["tool_parser"] == "glm45"  # nothing saved by a bad request
    assert httpx.patch(url, json={"tool_parser": None}).json()["tool_parser"] is None
