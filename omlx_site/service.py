"""`omlx service install | uninstall | status`: run `omlx serve` under the user's service manager,
which starts it at login and restarts it when it crashes.

Linux: a systemd user unit, ``~/.config/systemd/user/omlx.service`` (``Restart=on-failure``).
macOS: a launchd agent, ``~/Library/LaunchAgents/com.omlx.server.plist`` (``KeepAlive`` unless it
exited cleanly). The unit runs this Python (absolute path) with ``-m omlx_site.cli serve`` and the
serve flags given to ``install``, with ``OMLX_HOME`` set. When the manager cannot be reached (no
user systemd, as in containers, or another unit directory was chosen) the file is still written and
the command says how to start it; that is not an error.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

UNIT_NAME = "omlx.service"
LABEL = "com.omlx.server"


@dataclass
class Outcome:
    """What a service action did: the lines to print and the exit code."""

    lines: List[str]
    code: int = 0


def default_manager() -> str:
    return "launchd" if sys.platform == "darwin" else "systemd"


def serve_command(serve_args: List[str]) -> List[str]:
    """The server's command line: this interpreter (not resolved: a venv's python is a link that
    must stay one) running the CLI module, with paths in the flags made absolute."""
    args = list(serve_args)
    for i, arg in enumerate(args):
        for flag in ("--model-dir", "--paged-ssd-cache-dir"):
            if arg == flag and i + 1 < len(args) and args[i + 1].lower() != "off":
                args[i + 1] = str(Path(args[i + 1]).expanduser().resolve())
            elif arg.startswith(flag + "=") and arg.split("=", 1)[1].lower() != "off":
                args[i] = f"{flag}={Path(arg.split('=', 1)[1]).expanduser().resolve()}"
    return [os.path.abspath(sys.executable), "-m", "omlx_site.cli", "serve", *args]


def _run(command: List[str]) -> Optional[subprocess.CompletedProcess]:
    """Run a manager command; None when it is not installed."""
    if shutil.which(command[0]) is None:
        return None
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return subprocess.CompletedProcess(command, 1, "", str(err))


def _why(result: Optional[subprocess.CompletedProcess], name: str) -> str:
    if result is None:
        return f"{name} is not installed"
    return (result.stderr or result.stdout).strip() or f"exit code {result.returncode}"


class SystemdService:
    """A systemd user unit."""

    def __init__(self, unit_dir: Optional[Path] = None):
        config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        self.default_dir = config / "systemd" / "user"
        self.dir = Path(unit_dir).expanduser().resolve() if unit_dir else self.default_dir
        self.path = self.dir / UNIT_NAME

    def render(self, command: List[str], home: Path, stop_seconds: float) -> str:
        return "\n".join(
            [
                "# Written by `omlx service install`; `omlx service uninstall` removes it.",
                "[Unit]",
                "Description=omlx LLM inference server",
                "After=network-online.target",
                "",
                "[Service]",
                "Type=simple",
                f"ExecStart={' '.join(_systemd_quote(a) for a in command)}",
                f"Environment={_systemd_quote(f'OMLX_HOME={home}')}",
                "Environment=PYTHONUNBUFFERED=1",
                "Restart=on-failure",
                "RestartSec=5",
                # SIGTERM drains the running requests (OMLX_SHUTDOWN_GRACE_SECONDS) before the exit.
                "KillSignal=SIGTERM",
                f"TimeoutStopSec={int(stop_seconds)}",
                "",
                "[Install]",
                "WantedBy=default.target",
                "",
            ]
        )

    def _managed(self) -> bool:
        return self.dir == self.default_dir

    def install(self, command: List[str], home: Path, stop_seconds: float) -> Outcome:
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_private(self.path, self.render(command, home, stop_seconds).encode())
        lines = [f"wrote {self.path}"]
        if not self._managed():
            lines.append(
                f"{self.dir} is not systemd's user unit directory: link or copy the unit to "
                f"{self.default_dir}, then `systemctl --user enable --now {UNIT_NAME}`"
            )
            return Outcome(lines)
        reload = _run(["systemctl", "--user", "daemon-reload"])
        if reload is None or reload.returncode != 0:
            lines.append(
                f"systemd (user) cannot be reached ({_why(reload, 'systemctl')}); start it "
                f"with `systemctl --user daemon-reload && systemctl --user enable --now {UNIT_NAME}` "
                "in a login session (and `loginctl enable-linger $USER` to run it without one)"
            )
            return Outcome(lines)
        enable = _run(["systemctl", "--user", "enable", "--now", UNIT_NAME])
        if enable.returncode != 0:
            lines.append(f"`systemctl --user enable --now {UNIT_NAME}` failed: {_why(enable, 'systemctl')}")
            return Outcome(lines, 1)
        lines.append(
            f"enabled and started {UNIT_NAME} (logs: journalctl --user -u omlx, {home}/logs/server.log)"
        )
        return Outcome(lines)

    def uninstall(self) -> Outcome:
        lines = []
        if self._managed():
            stop = _run(["systemctl", "--user", "disable", "--now", UNIT_NAME])
            if stop is not None and stop.returncode == 0:
                lines.append(f"stopped and disabled {UNIT_NAME}")
        if not self.path.exists():
            return Outcome(lines + [f"not installed: {self.path} does not exist"])
        self.path.unlink()
        lines.append(f"removed {self.path}")
        if self._managed():
            _run(["systemctl", "--user", "daemon-reload"])
        return Outcome(lines)

    def status(self) -> Outcome:
        if not self.path.exists():
            return Outcome([f"not installed ({self.path} does not exist)"], 3)
        lines = [f"installed: {self.path}", "command: " + _exec_start(self.path.read_text())]
        if not self._managed():
            return Outcome(lines + ["running: unknown (not in systemd's user unit directory)"])
        active = _run(["systemctl", "--user", "is-active", UNIT_NAME])
        state = (active.stdout.strip() if active is not None else "") or "unknown"
        if active is None or state not in ("active", "inactive", "failed", "activating", "deactivating"):
            return Outcome(
                lines + [f"running: unknown (systemd (user) cannot be reached: {_why(active, 'systemctl')})"]
            )
        return Outcome(lines + [f"running: {'yes' if state == 'active' else 'no'} ({state})"])


class LaunchdService:
    """A launchd agent of the logged-in user."""

    def __init__(self, unit_dir: Optional[Path] = None):
        self.default_dir = Path.home() / "Library" / "LaunchAgents"
        self.dir = Path(unit_dir).expanduser().resolve() if unit_dir else self.default_dir
        self.path = self.dir / f"{LABEL}.plist"

    def render(self, command: List[str], home: Path, stop_seconds: float) -> bytes:
        logs = home / "logs"
        return plistlib.dumps(
            {
                "Label": LABEL,
                "ProgramArguments": command,
                "EnvironmentVariables": {"OMLX_HOME": str(home), "PYTHONUNBUFFERED": "1"},
                "RunAtLoad": True,
                "KeepAlive": {"SuccessfulExit": False},  # restarted after a crash, not after a clean stop
                "ThrottleInterval": 5,
                "ExitTimeOut": int(stop_seconds),
                "StandardOutPath": str(logs / "launchd.out.log"),
                "StandardErrorPath": str(logs / "launchd.err.log"),
            }
        )

    def _managed(self) -> bool:
        return self.dir == self.default_dir and shutil.which("launchctl") is not None

    def _domain(self) -> str:
        return f"gui/{os.getuid()}"

    def install(self, command: List[str], home: Path, stop_seconds: float) -> Outcome:
        self.dir.mkdir(parents=True, exist_ok=True)
        (home / "logs").mkdir(parents=True, exist_ok=True)
        _write_private(self.path, self.render(command, home, stop_seconds))
        lines = [f"wrote {self.path}"]
        if not self._managed():
            lines.append(
                f"not loaded (launchctl is not here, or {self.dir} is not ~/Library/LaunchAgents): "
                f"load it with `launchctl bootstrap gui/$(id -u) {self.path}`"
            )
            return Outcome(lines)
        _run(["launchctl", "bootout", f"{self._domain()}/{LABEL}"])  # a previous version, if loaded
        load = _run(["launchctl", "bootstrap", self._domain(), str(self.path)])
        if load.returncode != 0:
            lines.append(f"`launchctl bootstrap` failed: {_why(load, 'launchctl')}")
            return Outcome(lines, 1)
        lines.append(f"loaded {LABEL} (logs: {home}/logs/server.log)")
        return Outcome(lines)

    def uninstall(self) -> Outcome:
        lines = []
        if self._managed():
            out = _run(["launchctl", "bootout", f"{self._domain()}/{LABEL}"])
            if out is not None and out.returncode == 0:
                lines.append(f"unloaded {LABEL}")
        if not self.path.exists():
            return Outcome(lines + [f"not installed: {self.path} does not exist"])
        self.path.unlink()
        return Outcome(lines + [f"removed {self.path}"])

    def status(self) -> Outcome:
        if not self.path.exists():
            return Outcome([f"not installed ({self.path} does not exist)"], 3)
        try:
            args = plistlib.loads(self.path.read_bytes()).get("ProgramArguments", [])
        except Exception as err:  # noqa: BLE001 - edited by hand
            args = [f"(unreadable plist: {err})"]
        lines = [f"installed: {self.path}", "command: " + " ".join(map(str, args))]
        if not self._managed():
            return Outcome(
                lines + ["running: unknown (launchctl is not here, or not ~/Library/LaunchAgents)"]
            )
        out = _run(["launchctl", "print", f"{self._domain()}/{LABEL}"])
        if out.returncode != 0:
            return Outcome(lines + ["running: no (not loaded)"])
        running = any(line.strip() == "state = running" for line in out.stdout.splitlines())
        return Outcome(lines + [f"running: {'yes' if running else 'no'}"])


def service_for(manager: str, unit_dir: Optional[str] = None):
    if manager == "systemd":
        return SystemdService(unit_dir)
    if manager == "launchd":
        return LaunchdService(unit_dir)
    raise ValueError(f"unknown service manager {manager!r}; systemd or launchd")


def _write_private(path: Path, data: bytes) -> None:
    """Readable by the user alone: the serve flags may hold the API key."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _systemd_quote(arg: str) -> str:
    """One word of a systemd command line or assignment: specifiers (%) and variables ($) escaped,
    quoted when it holds blanks or quotes."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if arg and not any(c in arg for c in " \t\"'\\;"):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec_start(unit_text: str) -> str:
    return next(
        (line.split("=", 1)[1] for line in unit_text.splitlines() if line.startswith("ExecStart=")), "?"
    )
