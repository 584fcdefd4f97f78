"""`omlx launch`: the real coding agents (Claude Code, Codex CLI, opencode from npm; aider from PyPI,
installed by scripts/install_clients.sh into .clients/ or $OMLX_CLIENTS_DIR) in their
non-interactive modes against a live `omlx serve`, through `omlx launch` itself; --print; the
errors a user meets. Each client runs with HOME in a temp folder that holds a config file of the
user's own, which must come out unchanged.

The model: the tiny random-weight qwen2 with a 128K-token context (the agents' system prompts
and tools are 15-50K tokens with its small vocabulary) and a quarter of its vocabulary as stop
tokens, so that a reply ends after a few tokens as a real model's turn does (a reply cut by
max_tokens is an error for Claude Code).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.server import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_DIR = Path(os.environ.get("OMLX_CLIENTS_DIR") or ROOT / ".clients")
PROGRAMS = {
    "claude": "npm/bin/claude",
    "codex": "npm/bin/codex",
    "opencode": "npm/bin/opencode",
    "aider": "aider/bin/aider",
}
KEY = "launch-key"
# A config of the user's own per client: `omlx launch` must leave each byte of it as it was.
USER_CONFIGS = {
    ".claude/settings.json": '{"env": {"USER_OWN_SETTING": "1"}}\n',
    ".codex/config.toml": 'model = "users-own-model"\n',
    ".config/opencode/opencode.json": '{"$schema": "https://opencode.ai/config.json", "autoshare": false}\n',
    ".aider.conf.yml": "dark-mode: true\n",
}


def client_bin(client: str) -> Path:
    path = CLIENTS_DIR / PROGRAMS[client]
    if not path.exists():
        pytest.skip(
            f"{client} is not installed at {path}: run `bash scripts/install_clients.sh` "
            "(npm for claude, codex, opencode; PyPI for aider)"
        )
    return path


@pytest.fixture(scope="module")
def agent_models(tmp_path_factory, model_dir):
    """A model folder holding "tiny": the agents' test model (see the module docstring)."""
    models = tmp_path_factory.mktemp("agent-models")
    path = shutil.copytree(model_dir("qwen2", "tiny", max_position_embeddings=131072), models / "tiny")
    stops = [2, *range(4, 1024, 4)]  # <|im_end|> and every 4th token (none of the usual first ones)
    for name in ("config.json", "generation_config.json"):
        config = json.loads((path / name).read_text())
        config["eos_token_id"] = stops
        (path / name).write_text(json.dumps(config))
    return models


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory, agent_models):
    server = ServerProcess(
        ["--model-dir", str(agent_models), "--api-key", KEY], tmp_path_factory.mktemp("agent-home")
    )
    yield server
    server.stop()


@pytest.fixture
def user_home(tmp_path):
    home = tmp_path / "user"
    for name, text in USER_CONFIGS.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    (tmp_path / "work").mkdir()
    return home


def assert_user_configs_unchanged(home: Path) -> None:
    for name, text in USER_CONFIGS.items():
        assert (home / name).read_text() == text, f"omlx launch changed the user's {name}"


def launch(args, omlx_home: Path, user_home: Path, timeout=600, **env):
    """`omlx launch ARGS` as a user runs it: HOME=user_home, the clients on PATH, no terminal."""
    path = os.pathsep.join(
        [str(CLIENTS_DIR / "npm" / "bin"), str(CLIENTS_DIR / "aider" / "bin"), os.environ.get("PATH", "")]
    )
    full_env = dict(
        os.environ,
        HOME=str(user_home),
        OMLX_HOME=str(omlx_home),
        PATH=path,
        OMLX_DATABASE=str(omlx_home / "omlx.sqlite3"),
        PYTHONUNBUFFERED="1",
    )
    full_env.update(env)
    for name in (
        "OMLX_API_KEY",
        "OMLX_MODEL_DIR",
        "OMLX_PORT",
        "OMLX_HOST",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        if name not in env:
            full_env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "launch", *args],
        env=full_env,
        cwd=user_home.parent / "work",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def started_pid(stderr: str):
    marker = "started `omlx serve` (pid "
    if marker not in stderr:
        return None
    return int(stderr.split(marker, 1)[1].split(",", 1)[0])


def claude_turn(omlx_home, user_home, *extra, short=True, started=None):
    """One `omlx launch claude -p` turn: its JSON result and stderr. The pid of a server it
    started goes into ``started`` (a list) before anything is checked, for the caller to stop."""
    args = ["claude", "-p", "Say hello.", "--output-format", "json", *extra]
    if short:  # Claude Code's own system prompt and tools are ~47K tokens here: see the slow test
        args += ["--system-prompt", "You are a terse assistant.", "--tools", ""]
    done = launch(args, omlx_home, user_home)
    if started is not None and started_pid(done.stderr) is not None:
        started.append(started_pid(done.stderr))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["is_error"] is False and result["stop_reason"] == "end_turn", result
    assert result["modelUsage"].keys() == {"tiny"}, result  # every request went to omlx's model
    return result, done.stderr


def test_claude_code_starts_the_server_and_its_second_turn_reads_the_cache(tmp_path, user_home, agent_models):
    """No server runs: `omlx launch` starts one from the settings (a port, the model folder, an API
    key), Claude Code finishes a turn; the second turn finds that server and reads the cache."""
    client_bin("claude")
    from omlx_site import config

    home = tmp_path / "omlx-home"
    config.save({"port": free_port(), "model_dir": [agent_models], "api_key": KEY}, home)
    started = []
    try:
        first, _ = claude_turn(home, user_home, started=started)
        assert len(started) == 1
        assert first["usage"]["input_tokens"] > 0
        second, _ = claude_turn(home, user_home, "--continue", started=started)
        assert len(started) == 1  # the second found the running server
        assert second["session_id"] == first["session_id"]
        assert second["usage"]["cache_read_input_tokens"] > first["usage"]["cache_read_input_tokens"], second
    finally:
        for pid in started:
            stop_pid(pid)
    assert_user_configs_unchanged(user_home)


@pytest.mark.slow
def test_claude_code_with_its_full_system_prompt_and_tools(tmp_path, user_home, agent_server):
    """Claude Code's own prompt (tens of thousands of tokens): both turns succeed, the second
    reads the first's prompt from the cache."""
    client_bin("claude")
    home = tmp_path / "omlx-home"
    url = ["--url", agent_server.url, "--api-key", KEY]
    first, _ = claude_turn_full(home, user_home, url)
    second, _ = claude_turn_full(home, user_home, url, "--continue")
    assert second["usage"]["cache_read_input_tokens"] > 10_000, second
    assert_user_configs_unchanged(user_home)


def claude_turn_full(home, user_home, url, *extra):
    done = launch([*url, "claude", "-p", "Say hello.", "--output-format", "json", *extra], home, user_home)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["is_error"] is False, result
    return result, done.stderr


def test_aider_finishes_a_turn(tmp_path, user_home, agent_server):
    client_bin("aider")
    done = launch(
        [
            "--url",
            agent_server.url,
            "--api-key",
            KEY,
            "aider",
            "--message",
            "Say hello.",
            "--yes-always",
            "--no-git",
        ],
        tmp_path / "omlx-home",
        user_home,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "Model: openai/tiny" in out and "Tokens: " in out and " received" in out, out
    for failure in ("Empty response", "litellm.", "Error", "Failed to resolve"):
        assert failure not in out, out  # no API error, no download attempt of litellm's model list
    assert_user_configs_unchanged(user_home)


def test_codex_exec_finishes_a_turn(tmp_path, user_home, agent_server):
    client_bin("codex")
    home = tmp_path / "omlx-home"
    done = launch(
        ["--url", agent_server.url + "/v1", "codex", "exec", "--skip-git-repo-check", "Say hello."],
        home,
        user_home,
        OMLX_API_KEY=KEY,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "provider: omlx" in done.stderr and "model: tiny" in done.stderr, done.stderr
    assert done.stdout.strip(), done.stderr  # the final message
    assert "ERROR" not in done.stderr, done.stderr
    assert_user_configs_unchanged(user_home)


@pytest.mark.slow
def test_opencode_run_finishes_a_turn(tmp_path, user_home, agent_server):
    client_bin("opencode")
    home = tmp_path / "omlx-home"
    done = launch(
        ["--url", agent_server.url, "--api-key", KEY, "opencode", "run", "Say hello."], home, user_home
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tiny" in done.stderr and done.stdout.strip(), done.stdout + done.stderr
    assert "Error" not in done.stdout + done.stderr, done.stdout + done.stderr
    written = json.loads((home / "launch" / "opencode" / "opencode.json").read_text())
    assert written["model"] == "omlx/tiny" and KEY not in json.dumps(written)  # the key is not on disk
    assert_user_configs_unchanged(user_home)


def test_print_shows_each_client_s_settings(tmp_path, user_home, agent_server):
    from omlx_site import integrations

    for client in integrations.CLIENTS:
        done = launch(
            ["--url", agent_server.url, "--api-key", KEY, "--print", client],
            tmp_path,
            user_home,
            PATH="/nonexistent",
        )  # --print needs no client
        assert done.returncode == 0, done.stderr
        target = integrations.Target(agent_server.url, KEY, "tiny", 131072)
        assert done.stdout == integrations.setup(client, target).snippet + "\n"
    assert not (tmp_path / "launch").exists()  # --print writes nothing
    claude = launch(
        ["--url", agent_server.url, "--api-key", KEY, "--print", "claude"], tmp_path, user_home
    ).stdout
    assert f"export ANTHROPIC_BASE_URL={agent_server.url}\n" in claude
    assert f"export ANTHROPIC_AUTH_TOKEN={KEY}\n" in claude and "unset ANTHROPIC_API_KEY" in claude
    assert (
        "export ANTHROPIC_MODEL=tiny\n" in claude and "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1" in claude
    )
    codex = launch(
        ["--url", agent_server.url, "--api-key", KEY, "--print", "codex"], tmp_path, user_home
    ).stdout
    assert f'base_url = "{agent_server.url}/v1"' in codex and f"export OMLX_API_KEY={KEY}" in codex


def test_print_with_no_server_reads_the_settings_and_the_disk(tmp_path, user_home, agent_models):
    from omlx_site import config

    port = free_port()
    config.save({"port": port, "model_dir": [agent_models]}, tmp_path)
    done = launch(["--print", "aider"], tmp_path, user_home)
    assert done.returncode == 0, done.stderr
    assert f"export OPENAI_API_BASE=http://127.0.0.1:{port}/v1\n" in done.stdout
    assert "export AIDER_MODEL=openai/tiny\n" in done.stdout and '"max_input_tokens": 131072' in done.stdout
    assert "started" not in done.stderr and not (tmp_path / "logs" / "launch-serve.log").exists()


def test_what_a_user_gets_wrong(tmp_path, user_home, agent_server):
    url = ["--url", agent_server.url]
    wrong_key = launch([*url, "--api-key", "not-the-key", "claude"], tmp_path, user_home)
    assert wrong_key.returncode == 1 and "refused the API key" in wrong_key.stderr, wrong_key.stderr
    no_key = launch([*url, "aider"], tmp_path, user_home)
    assert no_key.returncode == 1 and "refused the API key" in no_key.stderr
    unknown = launch([*url, "--api-key", KEY, "--model", "nope", "codex"], tmp_path, user_home)
    assert unknown.returncode == 1 and "no chat model 'nope' (the models: tiny)" in unknown.stderr
    missing = launch(
        [*url, "--api-key", KEY, "opencode", "run", "hi"], tmp_path, user_home, PATH="/nonexistent"
    )
    assert (
        missing.returncode == 1
        and "opencode is not on PATH; install it: npm install -g opencode-ai" in missing.stderr
    )
    nothing = launch(
        ["--url", f"http://127.0.0.1:{free_port()}", "--no-start", "claude"], tmp_path, user_home
    )
    assert nothing.returncode == 1 and "no omlx server answers at" in nothing.stderr
    from omlx_site import config

    config.save({"port": 0}, tmp_path / "zero")
    zero = launch(["claude"], tmp_path / "zero", user_home)
    assert zero.returncode == 1 and "the port setting is 0" in zero.stderr, zero.stderr
    bad_client = launch(["vim"], tmp_path, user_home)
    assert bad_client.returncode == 2 and "invalid choice: 'vim'" in bad_client.stderr


def test_a_server_that_is_not_omlx(tmp_path, user_home):
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = launch(["--url", f"http://127.0.0.1:{server.server_port}", "claude"], tmp_path, user_home)
    finally:
        server.shutdown()
    assert done.returncode == 1 and "is not an omlx server" in done.stderr, done.stderr


def test_the_model_launch_picks():
    from omlx_site.integrations import pick_model

    def row(model_id, **kw):
        return dict(
            {
                "id": model_id,
                "type": "llm",
                "servable": True,
                "pinned": False,
                "loaded": False,
                "idle_seconds": None,
                "alias": None,
            },
            **kw,
        )

    rows = [row("b"), row("a"), row("emb", type="embedding"), row("bad", servable=False)]
    assert pick_model(rows) == "a"  # nothing pinned or loaded: the first by id
    rows.append(row("c", loaded=True, idle_seconds=50.0))
    rows.append(row("d", loaded=True, idle_seconds=3.0))
    assert pick_model(rows) == "d"  # the most recently used
    rows.append(row("z", pinned=True, alias="coder"))
    assert pick_model(rows) == "z" and pick_model(rows, "coder") == "z" and pick_model(rows, "c") == "c"
    for wrong in ("emb", "bad", "nope"):
        with pytest.raises(ValueError, match=f"no chat model '{wrong}'"):
            pick_model(rows, wrong)
    with pytest.raises(ValueError, match="no chat model"):
        pick_model([row("emb", type="embedding")])


def test_each_client_runs_with_the_user_s_arguments_and_config_left_alone(tmp_path, user_home, agent_server):
    """`omlx launch CLIENT --version` for each installed client: the client itself answers (the
    user's arguments reach it), omlx's files are under $OMLX_HOME/launch/ without the key, and the
    user's own config files are byte for byte as they were."""
    ran = []
    for client in ("claude", "codex", "opencode", "aider"):
        if not (CLIENTS_DIR / PROGRAMS[client]).exists():
            continue
        done = launch(
            ["--url", agent_server.url, "--api-key", KEY, client, "--version"],
            tmp_path,
            user_home,
            timeout=120,
        )
        assert done.returncode == 0 and done.stdout.strip(), (client, done.stdout, done.stderr)
        ran.append(client)
    if not ran:
        pytest.skip("no client installed: run `bash scripts/install_clients.sh`")
    assert_user_configs_unchanged(user_home)
    for path in (tmp_path / "launch").rglob("*"):
        assert path.is_dir() or KEY not in path.read_text(), path
    if "opencode" in ran:
        assert (
            json.loads((tmp_path / "launch" / "opencode" / "opencode.json").read_text())["model"]
            == "omlx/tiny"
        )


def test_launch_is_documented():
    import argparse

    from omlx_site.commands import launch as launch_command
    from omlx_site.integrations import CLIENTS

    parser = argparse.ArgumentParser(prog="omlx")
    launch_command.add_parser(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["launch"]
    flags = [
        s for action in sub._actions for s in action.option_strings if s.startswith("--") and s != "--help"
    ]
    cli_md = (ROOT / "docs" / "cli.md").read_text()
    readme = (ROOT / "README.md").read_text()
    section = cli_md.split("## `omlx launch`", 1)[1].split("\n## ", 1)[0]
    for flag in flags:
        assert flag in section, f"docs/cli.md does not document omlx launch {flag}"
        assert flag in readme.split("`omlx launch", 1)[1].split("\n", 1)[0], f"README's row lacks {flag}"
    for client in CLIENTS:
        assert f"`{client}`" in section
    assert "Integrations" in (ROOT / "docs" / "admin.md").read_text()
