"""The Settings and Downloads pages' actions in process (Django's test client): what the browser
tests (tests/e2e/test_settings.py, test_downloads.py) do not reach: a new API key in force at once
with the changer still logged in, settings from flags and variables refused, the restart refused
outside `omlx serve`, malformed download actions."""

import json
import os
import stat

import pytest
from django.conf import settings
from django.test import Client, override_settings

from omlx_site import config

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("OMLX_HOME", str(tmp_path))
    for s in config.SETTINGS:
        if s.env != "OMLX_HF_CACHE":
            monkeypatch.delenv(s.env, raising=False)
    saved = dict(config._launch)
    yield tmp_path
    config._launch.update(saved)


def test_a_new_api_key_is_in_force_at_once_and_never_shown(home):
    with override_settings(OMLX_API_KEY=None):
        client = Client()
        response = client.post("/admin/settings/save/", {"key": "api_key", "value": "s3cret-key"}, **HX)
        assert response.status_code == 200, response.content
        html = response.content.decode()
        assert "in force now" in html and "s3cret-key" not in html and "set (hidden)" in html
        assert settings.OMLX_API_KEY == "s3cret-key"
        stored = home / "settings.json"
        assert json.loads(stored.read_text())["api_key"] == "s3cret-key"
        assert stat.S_IMODE(os.stat(stored).st_mode) == 0o600
        assert client.get("/admin/settings/").status_code == 200  # the changer stays logged in
        assert "s3cret-key" not in client.get("/admin/settings/").content.decode()
        assert Client().get("/admin/settings/").status_code == 302  # anyone else logs in again
        assert Client().get("/v1/models").status_code == 401


def test_flags_and_variables_win_so_they_are_not_changed_here(home):
    config.remember_launch({"port": 9000}, {"OMLX_LOG_BACKUPS": "2", "OMLX_HF_CACHE": "off"})
    client = Client()
    rows = {r["key"]: r for r in config.describe()}
    assert rows["port"]["source"] == "flag" and rows["log_backups"]["source"] == "environment"
    response = client.post("/admin/settings/save/", {"key": "port", "value": "9001"}, **HX)
    assert response.status_code == 400 and "given as the flag --port" in response.content.decode()
    response = client.post("/admin/settings/save/", {"key": "log_backups", "value": "4"}, **HX)
    assert (
        response.status_code == 400 and "environment variable OMLX_LOG_BACKUPS" in response.content.decode()
    )
    response = client.post("/admin/settings/save/", {"key": "nope", "value": "4"}, **HX)
    assert response.status_code == 400 and "nope&#x27; is not a setting" in response.content.decode()
    response = client.post("/admin/settings/save/", {"key": "retry_after_seconds", "value": " "}, **HX)
    assert response.status_code == 400 and "type a value" in response.content.decode()
    assert not (home / "settings.json").exists()


def test_the_restart_needs_omlx_serve(home):
    config._launch.update(flags={}, environ=None)
    response = Client().post("/admin/settings/restart/", **HX)
    assert response.status_code == 409 and "not started by `omlx serve`" in response.content.decode()


def test_malformed_download_actions_get_a_message(home, tmp_path):
    with override_settings(OMLX_MODEL_DIRS=[tmp_path / "models"]):
        client = Client()
        for data, status, text in (
            ({"action": "explode"}, 400, "unknown action"),
            ({"action": "start", "repo": ""}, 400, "type the model&#x27;s id"),
            ({"action": "start", "repo": "a/b", "revision": "two words"}, 400, "is not a revision"),
            ({"action": "cancel", "id": "x"}, 400, "is not a download id"),
            ({"action": "cancel", "id": "999"}, 404, "not in the list"),
        ):
            response = client.post("/admin/downloads/action/", data, **HX)
            assert response.status_code == status, (data, response.content)
            assert text in response.content.decode(), (data, response.content)
