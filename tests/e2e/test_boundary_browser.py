"""The browser boundary (omlx_site/boundary.py) seen from Chromium: what a page of another site can
do to an `omlx serve` with the defaults a new user starts with (loopback, no API key).

Two small sites on other ports of this machine: "evil" (any page the user happens to open) and
"app" (a browser app the user named in --cors-origins). Chromium resolves rebind.example to
127.0.0.1, as a DNS-rebinding attacker's name would."""

import http.server
import threading

import pytest

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.support.server import ServerProcess

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<!doctype html><title>another site</title><p>another site</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def sites():
    """{"evil": origin, "app": origin}: two tiny web sites on 127.0.0.1."""
    servers = {name: http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page) for name in ("evil", "app")}
    for httpd in servers.values():
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield {name: f"http://127.0.0.1:{httpd.server_address[1]}" for name, httpd in servers.items()}
    for httpd in servers.values():
        httpd.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir, sites):
    import shutil

    models = tmp_path_factory.mktemp("boundary-browser-models")
    shutil.copytree(model_dir("qwen2", "tiny"), models / "tiny")
    flags = ["--model-dir", str(models), "--cors-origins", sites["app"]]
    process = ServerProcess(flags, tmp_path_factory.mktemp("boundary-browser-home"))
    process.port = int(process.url.rsplit(":", 1)[1])
    yield process
    process.stop()


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        rules = "--host-resolver-rules=MAP rebind.example 127.0.0.1"
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[*CHROMIUM_ARGS, rules])
        yield browser
        browser.close()


@pytest.fixture
def tab(chromium):
    context = chromium.new_context()
    context.set_default_timeout(30_000)
    yield context.new_page()
    context.close()


def test_a_simple_request_from_another_site_is_refused(tab, server, sites):
    """fetch() with mode no-cors and text/plain: what any page can send without a preflight."""
    tab.goto(sites["evil"])
    script = """([url, body]) => fetch(url, {method: "POST", mode: "no-cors",
        headers: {"Content-Type": "text/plain"}, body}).then(() => "sent", () => "failed")"""
    with tab.expect_response(lambda r: r.url.endswith("/v1/chat/completions")) as seen:
        tab.evaluate(script, [server.url + "/v1/chat/completions", _json(CHAT)])
    assert seen.value.status == 403  # the page cannot read it, but the model never ran


def test_a_page_of_another_site_cannot_open_the_console_websocket(tab, server, sites):
    tab.goto(sites["evil"])
    script = """(url) => new Promise((done) => {
        const ws = new WebSocket(url);
        ws.onopen = () => { ws.close(); done("open"); };
        ws.onclose = () => done("refused");
    })"""
    assert tab.evaluate(script, f"ws://127.0.0.1:{server.port}/ws/admin/status/") == "refused"


def test_a_rebound_name_gets_nothing(tab, server):
    answer = tab.goto(f"http://rebind.example:{server.port}/admin/status/")
    assert answer.status == 400
    assert "not one of this server's names" in tab.inner_text("body")
    script = """(url) => fetch(url).then((r) => r.status)"""  # same-origin for the page: readable
    assert tab.evaluate(script, f"http://rebind.example:{server.port}/v1/models") == 400


def test_a_named_app_calls_the_api_through_cors(tab, server, sites):
    tab.goto(sites["app"])
    script = """([url, body]) => fetch(url, {method: "POST", body, headers: {
        "Content-Type": "application/json", "Authorization": "Bearer none"}})
        .then((r) => r.json()).then((j) => j.object, (e) => String(e))"""
    assert tab.evaluate(script, [server.url + "/v1/chat/completions", _json(CHAT)]) == "chat.completion"


def test_the_console_says_auth_is_off_and_runs_under_its_csp(tab, server):
    violations = []
    tab.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    with tab.expect_websocket() as opened:
        tab.goto(server.url + "/admin/status/")
    notice = tab.locator("#auth-off-notice")
    assert notice.is_visible() and "every program on this machine" in notice.inner_text()
    opened.value.wait_for_event("framereceived")  # connect-src lets the page reach its own ws://
    tab.goto(server.url + "/admin/chat/")  # its own script file, not an inline one
    tab.wait_for_load_state("load")
    assert not violations, violations


def _json(value) -> str:
    import json

    return json.dumps(value)
