"""What `omlx serve` keeps and tells (docs/security.md), against a live server: OMLX_HOME and its
files are private to their owner, a 500 carries no exception text (the log has it), stored
Responses expire and their chains are capped."""

import json
import os
import shutil
import sqlite3
import stat

import httpx
import pytest

from tests.support.server import ServerProcess

CHAIN = 2  # OMLX_MAX_RESPONSE_CHAIN of this module's server


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir):
    models = tmp_path_factory.mktemp("private-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "broken")
    (models / "broken" / "tokenizer.json").write_text('{"version": "1.0", "model": ')  # cut short
    home = tmp_path_factory.mktemp("private-home")
    # A home as an older omlx left it: world-readable, with a world-readable settings.json.
    home.chmod(0o755)
    (home / "settings.json").write_text("{}\n")
    (home / "settings.json").chmod(0o644)
    server = ServerProcess(["--model-dir", str(models)], home, env={"OMLX_MAX_RESPONSE_CHAIN": str(CHAIN)})
    server.home = home
    yield server
    server.stop()


def respond(server, **body):
    return httpx.post(
        server.url + "/v1/responses",
        json={"model": "tiny", "input": "hi", "max_output_tokens": 2, **body},
        timeout=120,
    )


def test_omlx_home_and_its_files_are_private(server):
    assert respond(server).status_code == 200  # the database, logs and cache have something in them
    home = server.home
    assert (home / "omlx.sqlite3").exists() and (home / "logs" / "server.log").exists()
    loose = []
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            path = os.path.join(root, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode & 0o077:
                loose.append(f"{path}: {oct(mode)}")
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert not loose, loose


def test_a_500_names_no_exception_text(server):
    """The broken model's tokenizer cannot be read: the client learns that, not the parser's
    message (which may hold paths); the server's log has the traceback."""
    response = httpx.post(
        server.url + "/v1/messages/count_tokens",
        json={"model": "broken", "messages": [{"role": "user", "content": "hi"}]},
        timeout=120,
    )
    assert response.status_code == 500
    message = response.json()["error"]["message"]
    assert message == "The tokenizer of 'broken' cannot be loaded (the details are in the server's log)"
    assert server.wait_for_output("the tokenizer of broken cannot be loaded")
    assert server.wait_for_output("Traceback")


def test_stored_responses_expire(server):
    first = respond(server).json()
    assert httpx.get(f"{server.url}/v1/responses/{first['id']}", timeout=60).status_code == 200
    with sqlite3.connect(server.home / "omlx.sqlite3") as db:  # 31 days ago, as if it were
        db.execute(
            "UPDATE inference_storedresponse SET created = datetime('now', '-31 days') WHERE id = ?",
            (first["id"],),
        )
    assert httpx.get(f"{server.url}/v1/responses/{first['id']}", timeout=60).status_code == 404
    answer = respond(server, previous_response_id=first["id"])
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "previous_response_id"


def test_previous_response_chains_are_capped(server):
    last = None
    for _ in range(CHAIN + 1):  # each replays at most CHAIN stored responses
        last = respond(server, **({"previous_response_id": last} if last else {})).json()["id"]
    answer = respond(server, previous_response_id=last)  # would replay CHAIN + 1
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "response_chain_too_long" and error["param"] == "previous_response_id"
    assert json.dumps(error)  # the OpenAI envelope
