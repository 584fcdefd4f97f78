"""An unexpected exception in a route leaves as a 500 in the API's own envelope (OpenAI's,
Anthropic's) with an incident id and no exception text: the text (paths, prompts, keys) goes to
the server's log with the same id."""

import json
import logging

import pytest
from django.test import RequestFactory

from inference.urls import anthropic_api, api

SECRET_TEXT = "/home/someone/.ssh/id_ed25519 and the prompt 'my password is hunter2'"


@pytest.mark.parametrize("which", [api, anthropic_api], ids=["openai", "anthropic"])
def test_an_unexpected_error_is_logged_not_answered(which, caplog):
    request = RequestFactory().post("/v1/chat/completions", data="{}", content_type="application/json")
    with caplog.at_level(logging.ERROR, logger="omlx.api"):
        response = which.on_exception(request, RuntimeError(SECRET_TEXT))
    assert response.status_code == 500
    body = json.loads(response.content)
    message = body["error"]["message"]
    assert SECRET_TEXT not in response.content.decode() and "RuntimeError" not in message
    incident = message.split("incident ")[1].split(":")[0]
    logged = [r for r in caplog.records if incident in r.getMessage()]
    assert logged and SECRET_TEXT in str(logged[0].exc_info[1])
