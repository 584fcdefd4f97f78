"""MCP servers under `omlx serve --mcp-config` (inference/mcp/, inference/api/omlx/mcp.py), end to end:
a live omlx, a real stdio MCP server it starts itself and a real streamable-HTTP MCP server the
test starts (tests/support/mcp_servers/, written with the official SDK), driven over HTTP."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from inference.mcp import config as mcp_config
from tests.support.server import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
STDIO = str(ROOT / "tests" / "support" / "mcp_servers" / "stdio_server.py")
HTTP = str(ROOT / "tests" / "support" / "mcp_servers" / "http_server.py")
TOKEN = "s3cret"


class HttpMcp:
    """The streamable-HTTP test server in a subprocess (``port`` 0: a free one)."""

    def __init__(self, port=0):
        self.process = subprocess.Popen(
            [sys.executable, HTTP, TOKEN, str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.port = int(self.process.stdout.readline().split()[1])
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def kill(self):
        self.process.kill()
        self.process.wait()


def write_config(path, http_url):
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "local": {"command": sys.executable, "args": [STDIO], "env": {"OMLX_TEST": "1"}},
                    "web": {"type": "http", "url": http_url, "headers": {"X-Token": TOKEN}},
                    "noauth": {"url": http_url},  # refused by the server: reported, never fatal
                    "off": {"command": "never-run", "disabled": True},
                }
            }
        )
    )
    return path


def wait_for(get, check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if check(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def servers(base):
    return {s["name"]: s for s in httpx.get(f"{base}/v1/mcp/servers").json()["data"]}


def running(names):
    return lambda rows: all(rows.get(n, {}).get("state") == "running" for n in names)


def execute(base, **body):
    return httpx.post(f"{base}/v1/mcp/execute", json=body, timeout=60)


@pytest.fixture(scope="module")
def http_mcp():
    server = HttpMcp()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def omlx(tmp_path_factory, model_dir, http_mcp):
    models = tmp_path_factory.mktemp("mcp-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    path = write_config(tmp_path_factory.mktemp("mcp-config") / "mcp.json", http_mcp.url)
    server = ServerProcess(
        ["--model-dir", str(models), "--mcp-config", str(path)], tmp_path_factory.mktemp("omlx-home")
    )
    try:
        rows = wait_for(lambda: servers(server.url), running(["local", "web"]))
        assert running(["local", "web"])(rows), rows
        yield server
    finally:
        server.stop()


def test_servers_are_listed_with_their_state(omlx):
    rows = servers(omlx.url)
    assert set(rows) == {"local", "web", "noauth"}  # "off" is disabled
    assert rows["local"]["transport"] == "stdio" and rows["web"]["transport"] == "http"
    assert rows["local"]["tools"] == 7 and rows["web"]["tools"] == 1
    assert rows["local"]["last_error"] is None and rows["local"]["restarts"] == 0
    noauth = wait_for(lambda: servers(omlx.url)["noauth"], lambda r: r["restarts"] >= 1)
    assert noauth["state"] in ("crashed", "restarting") and noauth["tools"] == 0 and noauth["last_error"]


def test_tools_are_openai_tools_that_chat_completions_takes(omlx):
    tools = httpx.get(f"{omlx.url}/v1/mcp/tools").json()["data"]
    names = [t["function"]["name"] for t in tools]
    assert names == [
        "local__add",
        "local__echo",
        "local__pid",
        "local__fail",
        "local__forecast",
        "local__broken",
        "local__nap",
        "web__weather",
    ]
    add = tools[0]
    assert add["type"] == "function" and add["function"]["description"] == "Add two integers."
    assert add["function"]["parameters"]["required"] == ["a", "b"]
    reply = httpx.post(
        f"{omlx.url}/v1/chat/completions",
        timeout=120,
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": tools,
            "max_tokens": 2,
        },
    )
    assert reply.status_code == 200, reply.text


def test_execute_runs_tools_on_both_transports(omlx):
    reply = execute(omlx.url, tool_name="local__add", arguments={"a": 2, "b": 40})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert (body["server"], body["tool"], body["text"], body["is_error"]) == ("local", "add", "42", False)
    assert body["content"] == [{"type": "text", "text": "42"}] and body["structured_content"] == {
        "result": 42
    }
    # server + tool, arguments as the JSON text of an OpenAI tool call
    body = execute(omlx.url, server="local", tool="echo", arguments='{"text": "hé"}').json()
    assert body["text"] == "echo: hé"
    body = execute(omlx.url, tool_name="web__weather", arguments={"city": "Oslo"}).json()
    assert body["text"] == "sunny in Oslo"  # the configured header got through the token check
    # a tool that fails is a result (is_error) for the model, not an error of the call
    body = execute(omlx.url, tool_name="local__fail", arguments={"message": "no luck"}).json()
    assert body["is_error"] is True and body["text"].endswith("no luck")


@pytest.mark.parametrize(
    "body, status, expected",
    [
        ({"tool_name": "local__nope"}, 404, "has no tool named 'nope'"),
        ({"tool_name": "ghost__add"}, 404, "no MCP server named 'ghost'"),
        ({"tool_name": "add"}, 404, "SERVER__TOOL"),
        ({}, 400, "tool_name: required"),
        (
            {"tool_name": "local__add", "arguments": {"a": "two", "b": 1}},
            400,
            "at a: 'two' is not of type 'integer'",
        ),
        ({"tool_name": "local__add", "arguments": {"a": 1}}, 400, "'b' is a required property"),
        ({"tool_name": "local__add", "arguments": "[1, 2]"}, 400, "arguments: must be a JSON object"),
        ({"tool_name": "local__add", "arguments": "{oops"}, 400, "arguments: not valid JSON"),
        ({"tool_name": "local__add", "arguments": 7}, 400, "arguments: must be a JSON object"),
        ({"tool_name": "local__add", "arguments": {"a": 1, "b": 2}, "timeout": -1}, 400, "timeout"),
        ({"tool_name": "noauth__anything"}, 503, "the MCP server 'noauth' is"),
    ],
)
def test_execute_errors_are_4xx_with_a_message(omlx, body, status, expected):
    reply = execute(omlx.url, **body)
    assert reply.status_code == status, reply.text
    assert expected in reply.json()["error"]["message"]


def test_a_tool_that_takes_too_long_is_a_504_and_the_server_goes_on(omlx):
    reply = execute(omlx.url, tool_name="local__nap", arguments={"seconds": 5}, timeout=0.5)
    assert reply.status_code == 504 and reply.json()["error"]["code"] == "mcp_timeout"
    assert execute(omlx.url, tool_name="local__add", arguments={"a": 1, "b": 1}).json()["text"] == "2"
    bad = httpx.post(
        f"{omlx.url}/v1/mcp/execute", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400


def test_crashed_servers_are_reported_and_restarted_and_stop_with_omlx(tmp_path, model_dir):
    """Kill the stdio server's process and take the HTTP server away: each is reported, omlx goes
    on answering, and each is back once it can be (the stdio one restarted by omlx, the HTTP one
    reconnected when it listens again). Stopping omlx ends the stdio server's process."""
    web = HttpMcp()
    try:
        omlx = ServerProcess(
            [
                "--model-dir",
                str(tmp_path / "none"),
                "--mcp-config",
                str(write_config(tmp_path / "mcp.json", web.url)),
            ],
            tmp_path / "home",
        )
    except BaseException:
        web.kill()
        raise
    try:
        assert running(["local", "web"])(wait_for(lambda: servers(omlx.url), running(["local", "web"])))
        first = int(execute(omlx.url, tool_name="local__pid").json()["text"])
        os.kill(first, signal.SIGKILL)
        crashed = wait_for(lambda: servers(omlx.url)["local"], lambda r: r["restarts"] >= 1)
        assert "process exited" in crashed["last_error"]
        assert httpx.get(f"{omlx.url}/health").status_code == 200  # omlx is not taken down
        back = wait_for(lambda: servers(omlx.url)["local"], lambda r: r["state"] == "running")
        assert back["state"] == "running" and back["restarts"] == 1
        second = int(execute(omlx.url, tool_name="local__pid").json()["text"])
        assert second != first
        # the HTTP server goes away: a call fails with a 5xx, the server is reported, then it is back
        port = web.port
        web.kill()
        failed = execute(omlx.url, tool_name="web__weather", arguments={"city": "Rome"})
        assert failed.status_code == 503, (failed.status_code, failed.text)
        down = wait_for(lambda: servers(omlx.url)["web"], lambda r: r["restarts"] >= 1)
        assert down["state"] in ("crashed", "restarting") and down["last_error"]
        assert execute(omlx.url, tool_name="web__weather", arguments={"city": "Rome"}).status_code == 503
        web = HttpMcp(port)
        assert (
            wait_for(lambda: servers(omlx.url)["web"], lambda r: r["state"] == "running")["state"]
            == "running"
        )
        assert (
            execute(omlx.url, tool_name="web__weather", arguments={"city": "Rome"}).json()["text"]
            == "sunny in Rome"
        )
        log = tmp_path / "home" / "logs" / "mcp-local.log"
        assert log.exists()  # the stdio server's stderr
    finally:
        code = omlx.stop()
        web.kill()
    assert code == 0
    assert not _alive(second)  # the MCP server stopped with omlx


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of a process already gone counts as gone
    try:
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False


def run_serve(tmp_path, *args, env=None):
    env = dict(os.environ, OMLX_HOME=str(tmp_path / "home"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", "serve", "--port", "0", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_the_mcp_package_serve_says_how_to_install_it(tmp_path):
    blocker = tmp_path / "no-mcp"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoMcp:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp' or name.startswith('mcp.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, NoMcp())\n"
    )
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"local": {"command": sys.executable, "args": [STDIO]}}}))
    out = run_serve(
        tmp_path, "--mcp-config", str(path), env={"PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)])}
    )
    assert out.returncode == 2, out.stderr
    assert "need the MCP SDK" in out.stderr and "pip install 'omlx[mcp]'" in out.stderr
    assert "Traceback" not in out.stderr and "omlx serving" not in out.stdout


def test_a_bad_mcp_config_is_refused_with_its_place(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"web": {"url": "ftp://x"}}}))
    out = run_serve(tmp_path, "--mcp-config", str(path))
    assert out.returncode == 2 and "--mcp-config" in out.stderr and "mcpServers.web.url" in out.stderr
    out = run_serve(tmp_path, "--mcp-config", str(tmp_path / "missing.json"))
    assert out.returncode == 2 and "cannot be read" in out.stderr


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "must be a JSON object"),
        ({"servers": []}, "servers: must be an object"),
        ({"other": {}}, "no 'mcpServers' object"),
        ({"mcpServers": {"a__b": {"command": "x"}}}, "single '_'"),
        ({"mcpServers": {"a": {"command": ""}}}, "mcpServers.a.command"),
        ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, "mcpServers.a.args"),
        ({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}, "mcpServers.a.env"),
        ({"mcpServers": {"a": {"url": "http://h/mcp", "headers": []}}}, "mcpServers.a.headers"),
        ({"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}, "SSE transport is not supported"),
        ({"mcpServers": {"a": {"type": "websocket"}}}, "not 'stdio' or 'http'"),
        ({"mcpServers": {"a": {}}}, "needs 'command'"),
    ],
)
def test_config_errors_name_the_place(data, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mcp_config.parse(data)


def test_config_reads_claude_desktop_and_vscode_forms():
    specs = mcp_config.parse(
        {
            "mcpServers": {
                "files": {"command": "npx", "args": ["-y", "server"], "env": {"K": "v"}},
                "web": {"type": "streamable-http", "url": "https://h/mcp", "headers": {"A": "b"}},
                "gone": {"command": "x", "disabled": True},
            }
        }
    )
    assert [(s.name, s.transport) for s in specs] == [("files", "stdio"), ("web", "http")]
    assert specs[0].args == ["-y", "server"] and specs[0].env == {"K": "v"} and specs[1].headers == {"A": "b"}
    assert [s.name for s in mcp_config.parse({"servers": {"x": {"url": "http://h/mcp"}}})] == ["x"]


def test_without_mcp_config_the_routes_say_so_and_keep_the_api_key(settings):
    """In process, no manager: empty lists, a 404 that says how to configure MCP; the API key
    guards these routes like every /v1 route."""
    from django.test import Client

    client = Client()
    assert client.get("/v1/mcp/servers").json() == {"object": "list", "data": []}
    assert client.get("/v1/mcp/tools").json() == {"object": "list", "data": []}
    reply = client.post("/v1/mcp/execute", {"tool_name": "a__b"}, content_type="application/json")
    assert reply.status_code == 404 and reply.json()["error"]["code"] == "mcp_not_configured"
    assert "--mcp-config" in reply.json()["error"]["message"]
    settings.OMLX_API_KEY = "key"
    for path in ("/v1/mcp/servers", "/v1/mcp/tools"):
        assert client.get(path).status_code == 401
        assert client.get(path, HTTP_AUTHORIZATION="Bearer key").status_code == 200
    assert client.post("/v1/mcp/execute", {}, content_type="application/json").status_code == 401
