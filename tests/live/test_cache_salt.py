"""cache_salt against a live `omlx serve`, through the official SDKs: on every generation API the
same prompt under a new salt reuses nothing, under its own salt all but its last token, with the
same greedy output; bad salts are 400s in each API's envelope; after a restart the SSD tier still
keeps the salts apart. (The console's own salt: tests/unit/test_admin_chat.py.)"""

import shutil

import anthropic
import httpx
import openai
import pytest

from tests.support.server import ServerProcess

QUESTION = "Which of the two tenants asked about the blue lighthouse on the northern cliffs?"


@pytest.fixture(scope="module")
def args(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("salt-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path_factory.mktemp("salt-home")
    return ["--model-dir", str(models), "--paged-ssd-cache-dir", str(home / "ssd")], home


@pytest.fixture(scope="module")
def server(args):
    server = ServerProcess(*args)
    yield server
    server.stop()


def _openai(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def chat(url, text, salt):
    extra = {} if salt is None else {"cache_salt": salt}
    with _openai(url) as client:
        r = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": text}],
            temperature=0,
            max_tokens=6,
            extra_body=extra,
        )
    return r.choices[0].message.content, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


def completion(url, text, salt):
    extra = {} if salt is None else {"cache_salt": salt}
    with _openai(url) as client:
        r = client.completions.create(
            model="tiny", prompt=text, temperature=0, max_tokens=6, extra_body=extra
        )
    return r.choices[0].text, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


def response(url, text, salt):
    extra = {} if salt is None else {"cache_salt": salt}
    with _openai(url) as client:
        r = client.responses.create(
            model="tiny", input=text, temperature=0, max_output_tokens=6, store=False, extra_body=extra
        )
    return r.output_text, r.usage.input_tokens, r.usage.input_tokens_details.cached_tokens


def message(url, text, salt):
    extra = {"temperature": 0} if salt is None else {"temperature": 0, "cache_salt": salt}  # no SDK arg
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=120) as client:
        r = client.messages.create(
            model="tiny", messages=[{"role": "user", "content": text}], max_tokens=6, extra_body=extra
        )
    cached = r.usage.cache_read_input_tokens
    return r.content[0].text if r.content else "", r.usage.input_tokens + cached, cached


APIS = {"chat": chat, "completions": completion, "responses": response, "messages": message}


@pytest.mark.parametrize("api", APIS)
def test_salts_never_share_blocks_on_every_api(server, api):
    ask, text = APIS[api], f"{api}: {QUESTION}"
    answer, prompt, _ = ask(server.url, text, None)
    for salt in (f"{api}-a", f"{api}-b"):  # new salts: nothing cached under them, not even a template
        assert ask(server.url, text, salt) == (answer, prompt, 0), salt
    # Under its own salt the prompt is cached as without salts: all but its last token.
    assert ask(server.url, text, f"{api}-a") == (answer, prompt, prompt - 1)
    assert ask(server.url, text, None) == (answer, prompt, prompt - 1)


PATHS = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "completions": ("/v1/completions", {"prompt": "hi"}),
    "responses": ("/v1/responses", {"input": "hi"}),
    "messages": ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]}),
}


@pytest.mark.parametrize("api", PATHS)
def test_bad_salts_are_400s_in_the_apis_envelope(server, api):
    path, body = PATHS[api]
    body = {"model": "tiny", "max_tokens": 1, **body}
    for salt, why in (("x" * 257, "at most 256"), ("", "non-empty"), (7, "")):
        r = httpx.post(server.url + path, json={**body, "cache_salt": salt}, timeout=120)
        assert r.status_code == 400, (salt, r.text)
        error = r.json()["error"]
        assert "cache_salt" in error["message"] and why in error["message"]
        if api == "messages":
            assert r.json()["type"] == "error" and error["type"] == "invalid_request_error"
        else:
            assert error["param"] == "cache_salt"
    r = httpx.post(server.url + path, json={**body, "cache_salt": "x" * 256}, timeout=120)
    assert r.status_code == 200, r.text


def test_the_ssd_tier_keeps_salts_apart_after_a_restart(server, args):
    """Last in this module: it restarts the server. After the restart the RAM tier is empty, so
    every cached token comes from block files, whose chains start at the salted root."""
    text = f"restart: {QUESTION}"
    answer, prompt, _ = chat(server.url, text, "kept")
    server.stop()
    again = ServerProcess(*args)
    try:
        assert chat(again.url, text, "kept") == (answer, prompt, prompt - 1)
        assert chat(again.url, text, "other") == (answer, prompt, 0)
    finally:
        again.stop()
