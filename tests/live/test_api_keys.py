"""Keys with scopes on a live `omlx serve --api-key ADMIN` (inference/keys/): keys made with the
real `omlx keys` CLI, used with the official OpenAI and Anthropic SDKs; each route answers 403 to a
key without its scope and 401 to a wrong key, in its API's envelope; a revoked key is refused at
its next request; failed keys are throttled per client address; per-key counts reach /metrics."""

import json
import re
import shutil

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.admin_console import wait_until
from tests.support.keys_cli import create_key, omlx_keys
from tests.support.server import ServerProcess

ADMIN = "keys-admin-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("keys-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    home = tmp_path_factory.mktemp("keys-home")
    proc = ServerProcess(["--model-dir", str(models), "--api-key", ADMIN], home)
    proc.home = home
    yield proc
    proc.stop()


def oai(server, key):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=120)


def post(server, path, key=None, transport=None, **body):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(transport=transport, timeout=120) as client:
        return client.post(server.url + path, json=body, headers=headers)


def chat(client):
    return client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2, temperature=0
    )


def test_each_route_needs_its_scope(server):
    runner = create_key(server.home, "runner", "inference")
    manager = create_key(server.home, "manager", "models")
    assert re.fullmatch(r"omlx-[0-9a-f]{8}-[\w-]{43}", runner)

    with oai(server, runner) as client:
        assert chat(client).usage.completion_tokens == 2
        assert [m.id for m in client.models.list().data] == ["tiny"]
    with oai(server, manager) as client, pytest.raises(openai.PermissionDeniedError) as denied:
        chat(client)
    error = denied.value.body
    assert error["type"] == "permission_error" and error["code"] == "insufficient_scope"
    assert "'inference' scope" in error["message"] and "manager" in error["message"]

    # models: load/unload/settings; mcp: execute; admin: /metrics, cache status
    refused = post(server, "/v1/models/tiny/unload", runner)
    assert refused.status_code == 403 and "'models' scope" in refused.json()["error"]["message"]
    assert post(server, "/v1/models/tiny/unload", manager).status_code == 200
    assert post(server, "/v1/mcp/execute", runner, tool_name="x", arguments={}).status_code == 403
    for path in ("/metrics", "/v1/cache/status"):
        answer = httpx.get(server.url + path, headers={"Authorization": f"Bearer {runner}"})
        assert answer.status_code == 403, (path, answer.text)

    # Anthropic's envelope on /v1/messages
    with anthropic.Anthropic(base_url=server.url, api_key=manager, max_retries=0) as client:
        with pytest.raises(anthropic.PermissionDeniedError) as denied:
            client.messages.create(model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert denied.value.body["error"]["type"] == "permission_error"

    # a wrong key and no key: 401, as with --api-key alone
    with oai(server, runner[:-4] + "AAAA") as client, pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert httpx.get(server.url + "/v1/models").status_code == 401
    # the --api-key opens every scope
    assert httpx.get(server.url + "/metrics", headers={"x-api-key": ADMIN}).status_code == 200


def test_per_key_counts_in_metrics(server):
    key = create_key(server.home, "counted", "inference")
    key_id = key.split("-")[1]
    with oai(server, key) as client:
        for _ in range(2):
            chat(client)
    text = httpx.get(server.url + "/metrics", headers={"x-api-key": ADMIN}).text
    samples = {
        (s.name, s.labels.get("key_id"), s.labels.get("kind")): s
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    requests = samples[("omlx_key_requests_total", key_id, None)]
    assert requests.value == 2 and requests.labels["key_name"] == "counted"
    assert samples[("omlx_key_tokens_total", key_id, "completion")].value == 4
    assert samples[("omlx_key_tokens_total", key_id, "prompt")].value > 0


def test_revoked_key_is_refused_at_once_and_list_never_shows_keys(server):
    key = create_key(server.home, "short-lived", "inference", share_cache=True)
    key_id = key.split("-")[1]
    with oai(server, key) as client:
        client.models.list()
        listed = {row["id"]: row for row in json.loads(omlx_keys(server.home, "list", "--json").stdout)}
        assert listed[key_id]["name"] == "short-lived" and listed[key_id]["scopes"] == ["inference"]
        assert listed[key_id]["shares_cache"] is True
        table = omlx_keys(server.home, "list").stdout
        assert "short-lived" in table and key not in table and key[-20:] not in table
        wait_until(lambda: json.loads(omlx_keys(server.home, "list", "--json").stdout)[-1]["last_used"])

        assert "revoked" in omlx_keys(server.home, "revoke", "short-lived").stdout
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
    assert omlx_keys(server.home, "revoke", key_id, check=False).returncode == 1


def test_failed_keys_are_throttled_per_address(server):
    key = create_key(server.home, "throttled", "inference")
    other_address = httpx.HTTPTransport(local_address="127.0.0.2")
    for _ in range(10):
        assert post(server, "/v1/completions", "omlx-00000000-wrong", other_address).status_code == 401
    held = post(server, "/v1/completions", key, other_address, model="tiny", prompt="hi", max_tokens=1)
    assert held.status_code == 429, held.text
    assert int(held.headers["retry-after"]) > 0 and "failed API keys" in held.json()["error"]["message"]
    # another address is not held back
    assert post(server, "/v1/completions", key, model="tiny", prompt="hi", max_tokens=1).status_code == 200


def console_login(server, key) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=60)
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    answer = client.post("/admin/login/", data={"api_key": key, "csrfmiddlewaretoken": token})
    assert answer.status_code == 302, answer.text
    return client


def status_socket(server, client):
    from websockets.sync.client import connect

    cookie = f"omlx_sessionid={client.cookies['omlx_sessionid']}"
    return connect(
        server.url.replace("http", "ws") + "/ws/admin/status/", additional_headers={"Cookie": cookie}
    )


def close_code(socket, within=60.0):
    """The code the server closes ``socket`` with, reading its pushes meanwhile; None if it is
    still open after ``within`` seconds (a bound, so a socket left open fails instead of hanging)."""
    import time

    from websockets.exceptions import ConnectionClosed

    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            socket.recv(timeout=within)
    except ConnectionClosed as closed:
        return closed.rcvd.code
    return None


def test_console_websockets_close_when_their_key_is_revoked_or_they_log_out(server):
    key = create_key(server.home, "console", "admin")
    client = console_login(server, key)
    with status_socket(server, client) as socket:
        assert "status-cards" in socket.recv(timeout=60)  # open and pushing
        omlx_keys(server.home, "revoke", "console")  # another process: the sockets' periodic check
        assert close_code(socket) == 4401
    assert client.get("/admin/status/").status_code == 302  # the login ended with the key

    client = console_login(server, ADMIN)
    with status_socket(server, client) as socket:
        assert "status-cards" in socket.recv(timeout=60)
        client.post("/admin/logout/", headers={"X-CSRFToken": client.cookies["omlx_csrftoken"]})
        assert close_code(socket) == 4401


def cached(server, key, text, salt=None):
    extra = {} if salt is None else {"cache_salt": salt}
    with oai(server, key) as client:
        r = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": text}],
            max_tokens=2,
            temperature=0,
            extra_body=extra,
        )
    return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


def test_each_key_has_its_own_cache_unless_it_shares(server):
    """inference.api.common.cache_salt.effective_salt: a created key's requests are salted by the
    key; --share-cache keys and the --api-key share the unsalted cache; a body's cache_salt
    splits a key's cache further."""
    alice, bob = (create_key(server.home, n, "inference") for n in ("salt-alice", "salt-bob"))
    shared = create_key(server.home, "salt-shared", "inference", share_cache=True)
    text = "the same system prompt and question, sent under several keys " * 4

    prompt, hit = cached(server, alice, text)
    assert hit == 0
    assert cached(server, alice, text) == (prompt, prompt - 1)  # a key's own requests share
    assert cached(server, bob, text) == (prompt, 0)  # another key learns nothing
    assert cached(server, ADMIN, text) == (prompt, 0)  # nor the admin key (unsalted)
    assert cached(server, shared, text) == (prompt, prompt - 1)  # a sharing key: the unsalted cache
    assert cached(server, alice, text, salt="s") == (prompt, 0)  # key + body salt: its own
    assert cached(server, bob, text, salt="s") == (prompt, 0)  # the same body salt, another key
    assert cached(server, ADMIN, text, salt="s") == (prompt, 0)  # and without a key's salt


def test_a_placeholder_in_one_header_does_not_hide_the_key_in_the_other(server):
    """Clients may send both headers (an SDK's x-api-key placeholder next to a bearer token):
    either one carrying a valid key opens the route, as before keys had scopes."""
    runner = create_key(server.home, "both-headers", "inference")
    for headers in (
        {"x-api-key": "placeholder", "Authorization": f"Bearer {runner}"},
        {"x-api-key": runner, "Authorization": "Bearer placeholder"},
        {"x-api-key": "placeholder", "Authorization": f"Bearer {ADMIN}"},
    ):
        answer = httpx.get(server.url + "/v1/models", headers=headers, timeout=60)
        assert answer.status_code == 200, (headers, answer.text)
    wrong = httpx.get(server.url + "/v1/models", headers={"x-api-key": "a", "Authorization": "Bearer b"})
    assert wrong.status_code == 401
