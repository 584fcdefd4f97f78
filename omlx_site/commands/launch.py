"""`omlx launch CLIENT`: run a coding agent (Claude Code, Codex CLI, opencode, aider) against omlx.

Steps: find the server (--url, else the host and port of the settings) and check it is omlx
(GET /health) and takes the API key (GET /v1/models/status); when nothing answers, start
`omlx serve` in the background (its output in $OMLX_HOME/logs/launch-serve.log; it keeps running
after the client exits) unless --no-start. Pick the model (omlx_site/integrations.py
`pick_model`), write the client's files into $OMLX_HOME/launch/CLIENT/ and exec the client with
its environment and the user's arguments. --print shows the settings instead and starts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import httpx

from omlx_site import config, integrations

from .common import omlx_home
from .models import discover

START_TIMEOUT_SECONDS = 300.0  # a first start may build the demo model


class LaunchError(Exception):
    """Why the client cannot be launched (printed as ``omlx launch: MESSAGE``, exit 1)."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "launch",
        help="run a coding agent (claude, codex, opencode, aider) against omlx",
        description="Run Claude Code (claude), the OpenAI Codex CLI (codex), opencode or aider "
        "against omlx: find the running `omlx serve` (--url, else the host, port and API key of "
        "the settings), or start one in the background (its log: $OMLX_HOME/logs/launch-serve.log; "
        "it keeps running after the client exits); pick the model (--model, else a pinned model, "
        "else the loaded one used most recently, else the first by name); then run the client with "
        "its settings in its environment, on its command line or in a config file under "
        "$OMLX_HOME/launch/CLIENT/ (never in your own config files) and with its telemetry and "
        "update checks off. omlx launch's options come before CLIENT; everything after it goes to the "
        "client, e.g. `omlx launch --model qwen claude -p 'explain main.py'`. "
        "--print shows the settings instead.",
    )
    p.add_argument("client", choices=integrations.CLIENTS, help="the coding agent to run")
    p.add_argument(
        "client_args",
        nargs=argparse.REMAINDER,
        metavar="ARG",
        help="everything after CLIENT goes to the client as it is (omlx launch's own "
        "options come before CLIENT)",
    )
    p.add_argument("--model", help="the model id or alias (default: pinned, else most recently used)")
    p.add_argument("--url", help="the omlx server (default http://HOST:PORT of the settings)")
    p.add_argument("--api-key", help="its API key (default the api_key setting / $OMLX_API_KEY)")
    p.add_argument(
        "--print",
        action="store_true",
        dest="print_only",
        help="print the client's settings (environment variables, config snippet) "
        "instead of running it; starts no server",
    )
    p.add_argument(
        "--no-start", action="store_true", help="fail when no server answers instead of starting `omlx serve`"
    )
    p.set_defaults(run=run)


def _settings() -> dict:
    try:
        return config.load()
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def server_url(values: dict, url: Optional[str]) -> str:
    """--url, else the settings' host and port (a wildcard address is reached on loopback)."""
    if url:
        return url.rstrip("/").removesuffix("/v1")
    host = values["host"]
    if host in ("0.0.0.0", "", "*"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{values['port']}"


def _is_omlx(url: str) -> Optional[bool]:
    """True when an omlx server answers at ``url``, None when nothing answers, False for another
    kind of server."""
    try:
        response = httpx.get(url + "/health", timeout=5.0)
    except httpx.HTTPError:
        return None
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "status" in body and "version" in body


def model_rows(url: str, api_key: Optional[str]) -> List[dict]:
    """The server's /v1/models/status rows; LaunchError when it refuses the key."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(url + "/v1/models/status", headers=headers, timeout=30.0)
    except httpx.HTTPError as exc:
        raise LaunchError(f"the server at {url} did not answer: {exc}") from None
    if response.status_code == 401:
        raise LaunchError(
            f"the server at {url} refused the API key: give it with --api-key or "
            "OMLX_API_KEY (or the api_key setting)"
        )
    if response.status_code != 200:
        raise LaunchError(f"the server at {url} answered HTTP {response.status_code} to /v1/models/status")
    return response.json().get("data", [])


def start_server(url: str) -> subprocess.Popen:
    """`omlx serve` with the saved settings, detached, its output in the launch log; returns
    once it answers at ``url``. LaunchError when it exits or does not answer in time."""
    log_dir = omlx_home() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "launch-serve.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "omlx_site.cli", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    print(
        f"omlx launch: started `omlx serve` (pid {process.pid}, log {log_path}); it keeps "
        f"running after the client exits (stop it with: kill {process.pid})",
        file=sys.stderr,
    )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LaunchError(f"`omlx serve` exited with code {process.returncode}; see {log_path}")
        if _is_omlx(url):
            return process
        time.sleep(0.25)
    raise LaunchError(
        f"`omlx serve` (pid {process.pid}) did not answer at {url} within "
        f"{START_TIMEOUT_SECONDS:.0f} s; see {log_path}"
    )


def _disk_rows(values: dict) -> List[dict]:
    """Model rows from the model folders on disk (for --print when no server answers)."""
    return discover([Path(d) for d in values["model_dir"]], values.get("hf_cache"))


def client_args(given: List[str]) -> List[str]:
    """The client's arguments (a leading ``--`` separator dropped)."""
    return given[1:] if given[:1] == ["--"] else list(given)


def run(args) -> int:
    try:
        return _run(args)
    except LaunchError as exc:
        print(f"omlx launch: {exc}", file=sys.stderr)
        return 1


def _run(args) -> int:
    values = _settings()
    if not args.url and values["port"] == 0:
        raise LaunchError(
            "the port setting is 0 (a free port at each start), so the server cannot be "
            "found: give --url, or set a port (omlx serve --port 8000)"
        )
    url = server_url(values, args.url)
    api_key = args.api_key or values["api_key"]
    found = _is_omlx(url)
    if found is False:
        raise LaunchError(f"{url} answers but is not an omlx server (GET /health); give --url")
    if found:
        rows = model_rows(url, api_key)
    elif args.print_only:
        rows = _disk_rows(values)
    elif args.no_start:
        raise LaunchError(f"no omlx server answers at {url} (start one with `omlx serve`)")
    else:
        start_server(url)
        rows = model_rows(url, api_key)
    try:
        model = integrations.pick_model(rows, args.model)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    row = next(r for r in rows if r["id"] == model)
    target = integrations.Target(url, api_key, model, integrations.context_length(row))
    built = integrations.setup(args.client, target)
    if args.print_only:
        print(built.snippet)
        return 0
    program = shutil.which(built.program)
    if program is None:
        raise LaunchError(
            f"{built.program} is not on PATH; install it: {integrations.INSTALL_HINTS[args.client]}"
        )
    env = dict(os.environ)
    for name, value in integrations.write_files(built, omlx_home() / "launch" / args.client).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    print(f"omlx launch: {built.program} with model {model} at {url}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, [program, *built.args, *client_args(args.client_args)], env)
    return 0  # not reached
