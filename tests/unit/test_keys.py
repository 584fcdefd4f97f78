"""inference/keys/ in-process: the ring's constant-time match and reload on change, the failure
throttle, and the console's login with a created key when there is no --api-key (Django's client)."""

import re

import pytest
from django.test import Client, override_settings

from inference.keys import scopes, store
from inference.keys.ring import get_ring
from inference.keys.throttle import FailureThrottle

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def home(tmp_path):
    with override_settings(OMLX_HOME=tmp_path, OMLX_API_KEY=None):
        yield tmp_path
    get_ring().refresh()  # back to the keys of the home outside the test


def test_ring_matches_only_the_secret_and_sees_a_revoke(home):
    ring = get_ring()
    ring.refresh()
    assert not ring  # no stamp: no key was ever made here
    row, secret = store.create("ci", ["inference", "models"])
    ring.refresh()
    info = ring.match(secret)
    assert info.id == row.key_id and info.scopes == {"inference", "models"} and not info.shares_cache
    assert ring.match(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert ring.match("omlx-nokey-x") is None and ring.match("") is None
    store.revoke("ci")
    assert ring.stale()
    ring.refresh()
    assert ring.match(secret) is None and not ring


def test_scopes_and_names_are_checked(home):
    assert scopes.parse([]) == {"inference"}
    with pytest.raises(ValueError, match="unknown scope 'root'"):
        scopes.parse(["root"])
    store.create("one")
    with pytest.raises(ValueError, match="exists already"):
        store.create("one")
    with pytest.raises(ValueError, match="name:"):
        store.create("<script>")
    with pytest.raises(LookupError):
        store.revoke("two")


def test_throttle_holds_an_address_back_for_the_rest_of_the_window():
    throttle = FailureThrottle(limit=3, window=60)
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1") == 0
        throttle.fail("10.0.0.1")
    assert 0 < throttle.retry_after("10.0.0.1") <= 60
    assert throttle.retry_after("10.0.0.2") == 0


def _login(client, key):
    page = client.get("/admin/login/")
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content).group(1).decode()
    return client.post(
        "/admin/login/", {"api_key": key, "next": "/admin/keys/", "csrfmiddlewaretoken": token}
    )


def test_console_takes_an_admin_key_and_revoking_it_ends_the_login(home):
    open_page = Client().get("/admin/keys/")
    assert open_page.status_code == 200  # no key at all: open, as before keys
    _, runner = store.create("runner", ["inference"])
    _, admin = store.create("boss", ["admin"])
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR="10.1.0.1")
    assert client.get("/admin/keys/")["Location"].startswith("/admin/login/")  # keys exist: login
    refused = _login(client, runner)
    assert refused.status_code == 401 and b"admin scope" in refused.content
    assert _login(client, admin)["Location"] == "/admin/keys/"
    page = client.get("/admin/keys/")
    assert page.status_code == 200 and b"runner" in page.content and admin.encode() not in page.content

    token = client.cookies["omlx_csrftoken"].value
    made = client.post(
        "/admin/keys/action/",
        {"action": "create", "name": "web", "scope": ["inference", "mcp"]},
        HTTP_HX_REQUEST="true",
        HTTP_X_CSRFTOKEN=token,
    )
    secret = re.search(rb"<code>(omlx-[^<]+)</code>", made.content).group(1).decode()
    assert get_ring().match(secret).scopes == {"inference", "mcp"}
    assert secret.encode() not in client.get("/admin/keys/").content  # shown once

    boss = next(row for row in store.list_keys() if row.name == "boss")
    gone = client.post(
        "/admin/keys/action/",
        {"action": "revoke", "id": boss.key_id},
        HTTP_HX_REQUEST="true",
        HTTP_X_CSRFTOKEN=token,
    )
    assert gone.status_code == 401 and gone["HX-Redirect"] == "/admin/login/"
    assert client.get("/admin/keys/")["Location"].startswith("/admin/login/")


def test_failed_logins_are_throttled(home):
    _, admin = store.create("boss", ["admin"])
    client = Client(enforce_csrf_checks=True, REMOTE_ADDR="10.2.0.1")
    for _ in range(10):
        assert _login(client, "wrong").status_code == 401
    held = _login(client, admin)  # the right key too, while held back
    assert held.status_code == 429 and int(held["Retry-After"]) > 0
    assert _login(Client(enforce_csrf_checks=True, REMOTE_ADDR="10.2.0.2"), admin).status_code == 302


def test_created_keys_close_an_api_that_has_no_api_key(home):
    client = Client()
    assert client.get("/v1/cache/status").status_code == 200  # no key at all: open
    _, key = store.create("ops", ["admin"])
    missing = client.get("/v1/cache/status")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert client.get("/v1/cache/status", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200
    refused = client.get("/v1/models", HTTP_X_API_KEY=key)
    assert refused.status_code == 403 and "'inference' scope" in refused.json()["error"]["message"]


SCOPE_OF_ROUTE = {  # docs/keys.md's table
    "inference": {
        "list_models", "chat_completions", "completions", "create_response", "retrieve_response",
        "delete_response", "list_input_items", "embeddings", "rerank", "messages", "count_tokens",
    },
    "models": {
        "models_status", "models_rescan", "load_model", "unload_model", "get_settings", "patch_settings",
    },
    "mcp": {"mcp_servers", "mcp_tools", "mcp_execute"},
    "admin": {"cache_status", "step_trace"},
}  # fmt: skip


def test_every_api_route_asks_for_its_scope():
    import inspect

    from inference.urls import anthropic_api, api

    found = {}
    for ninja_api in (api, anthropic_api):
        for _, router in ninja_api._routers:
            for operations in router.path_operations.values():
                for op in operations.operations:
                    source = inspect.getsource(op.view_func)
                    asked = re.findall(r"check_api_key\(request, scopes\.(\w+)\)", source)
                    assert len(asked) == 1, f"{op.view_func.__name__} must call check_api_key once: {asked}"
                    found.setdefault(asked[0].lower(), set()).add(op.view_func.__name__)
    assert found == SCOPE_OF_ROUTE
