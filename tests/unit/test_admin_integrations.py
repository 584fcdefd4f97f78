"""The Integrations page in process: the snippets are `omlx launch --print`'s (same code, same
values), for the model of the form or the one launch would pick; the API key never in the page;
a bad model is a 400 with a message. The browser test: tests/e2e/test_integrations.py."""

import pytest
from django.test import override_settings

from omlx_site import integrations
from tests.support.admin_console import console  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_page_shows_every_client_for_the_picked_model(console):  # noqa: F811
    body = console.get("/admin/integrations/").content.decode()
    for client in integrations.CLIENTS:
        assert f'id="integration-{client}"' in body
        assert f"omlx launch --model other {client}" in body  # no pin, nothing loaded: the first by id
    assert "export ANTHROPIC_BASE_URL=http://testserver\n" in body
    assert "base_url = &quot;http://testserver/v1&quot;" in body
    assert "export OPENAI_API_BASE=http://testserver/v1" in body
    assert "broken" not in body.split('name="model"')[1].split("</select>")[0]  # not servable


def test_the_snippet_is_launch_print_s(console):  # noqa: F811
    import html

    body = html.unescape(console.get("/admin/integrations/?model=tiny").content.decode())
    target = integrations.Target("http://testserver", None, "tiny", 4096)
    for client in integrations.CLIENTS:
        assert integrations.setup(client, target).snippet in body


def test_the_api_key_is_never_in_the_page(console):  # noqa: F811
    with override_settings(OMLX_API_KEY="s3cret-key"):
        console.post("/admin/login/", {"api_key": "s3cret-key"})
        body = console.get("/admin/integrations/?model=tiny2").content.decode()
    assert "s3cret-key" not in body
    assert "export ANTHROPIC_AUTH_TOKEN=YOUR_OMLX_API_KEY" in body
    assert "export OMLX_API_KEY=YOUR_OMLX_API_KEY" in body and "omlx launch --model tiny2 codex" in body


def test_a_model_that_is_not_there(console):  # noqa: F811
    response = console.get("/admin/integrations/?model=nope", HTTP_HX_REQUEST="true")
    assert response.status_code == 400 and response["X-Omlx-Fragment"] == "1"
    body = response.content.decode()
    assert body.startswith('<div id="integrations">') and "no chat model &#x27;nope&#x27;" in body
