"""`omlx service install | status | uninstall` write, report and remove a systemd user unit or a
launchd agent; --unit-dir keeps them out of the real home."""

import os
import plistlib
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def omlx(*args, home):
    env = dict(os.environ, OMLX_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


def _exec_start(unit: str) -> list:
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line.split("=", 1)[1])]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_unit_verifies_and_runs_serve_with_the_flags(tmp_path):
    units, home = tmp_path / "units", tmp_path / "home"
    models = tmp_path / "my models 100%"  # a blank and a specifier character: quoting matters
    models.mkdir()
    installed = omlx(
        "service",
        "install",
        "--manager",
        "systemd",
        "--unit-dir",
        str(units),
        "--model-dir",
        str(models),
        "--port",
        "8123",
        "--api-key",
        "a$b",
        home=home,
    )
    assert installed.returncode == 0, installed.stderr
    unit_path = units / "omlx.service"
    assert f"wrote {unit_path}" in installed.stdout
    unit = unit_path.read_text()
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(unit_path)], capture_output=True, text=True, timeout=120
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr
    assert "Restart=on-failure" in unit.splitlines()
    assert unit_path.stat().st_mode & 0o077 == 0  # the flags may hold the API key
    assert "WantedBy=default.target" in unit.splitlines()
    assert f"Environment=OMLX_HOME={home}" in unit.splitlines()
    command = _exec_start(unit)
    assert command == [
        os.path.abspath(sys.executable),
        "-m",
        "omlx_site.cli",
        "serve",
        "--model-dir",
        str(models),
        "--port",
        "8123",
        "--api-key",
        "a$b",
    ]
    help_text = subprocess.run(command[:4] + ["--help"], capture_output=True, text=True, timeout=120, cwd="/")
    assert help_text.returncode == 0 and "--model-dir" in help_text.stdout

    status = omlx("service", "status", "--manager", "systemd", "--unit-dir", str(units), home=home)
    assert status.returncode == 0
    assert f"installed: {unit_path}" in status.stdout
    assert "running: unknown" in status.stdout  # a unit outside systemd's directory is not started

    removed = omlx("service", "uninstall", "--manager", "systemd", "--unit-dir", str(units), home=home)
    assert removed.returncode == 0 and f"removed {unit_path}" in removed.stdout
    assert list(units.iterdir()) == []
    status = omlx("service", "status", "--manager", "systemd", "--unit-dir", str(units), home=home)
    assert status.returncode == 3 and "not installed" in status.stdout
    again = omlx("service", "uninstall", "--manager", "systemd", "--unit-dir", str(units), home=home)
    assert again.returncode == 0 and "not installed" in again.stdout


def test_systemd_verify_catches_a_broken_unit(tmp_path):
    """The check above can fail: a unit whose command is not absolute does not verify."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("needs systemd-analyze")
    bad = tmp_path / "omlx.service"
    bad.write_text("[Service]\nExecStart=python -m omlx_site.cli serve\nRestart=on-failure\n")
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert verify.returncode != 0


def test_launchd_agent_is_a_valid_plist(tmp_path):
    agents, home = tmp_path / "agents", tmp_path / "home"
    installed = omlx(
        "service",
        "install",
        "--manager",
        "launchd",
        "--unit-dir",
        str(agents),
        "--model-dir",
        "relative/models",
        home=home,
    )
    assert installed.returncode == 0, installed.stderr
    path = agents / "com.omlx.server.plist"
    ET.parse(path)  # well-formed XML
    with open(path, "rb") as f:
        agent = plistlib.load(f)
    assert agent["Label"] == "com.omlx.server"
    assert agent["ProgramArguments"] == [
        os.path.abspath(sys.executable),
        "-m",
        "omlx_site.cli",
        "serve",
        "--model-dir",
        str((ROOT / "relative/models").resolve()),
    ]
    assert agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["EnvironmentVariables"]["OMLX_HOME"] == str(home)
    assert agent["StandardErrorPath"] == str(home / "logs" / "launchd.err.log")
    assert plistlib.loads(plistlib.dumps(agent)) == agent
    if shutil.which("plutil"):
        assert subprocess.run(["plutil", "-lint", str(path)], capture_output=True).returncode == 0

    status = omlx("service", "status", "--manager", "launchd", "--unit-dir", str(agents), home=home)
    assert status.returncode == 0 and f"installed: {path}" in status.stdout
    removed = omlx("service", "uninstall", "--manager", "launchd", "--unit-dir", str(agents), home=home)
    assert removed.returncode == 0 and not path.exists()
    status = omlx("service", "status", "--manager", "launchd", "--unit-dir", str(agents), home=home)
    assert status.returncode == 3


def test_a_wrong_serve_flag_writes_nothing(tmp_path):
    units = tmp_path / "units"
    result = omlx(
        "service",
        "install",
        "--manager",
        "systemd",
        "--unit-dir",
        str(units),
        "--prot",
        "80",
        home=tmp_path / "home",
    )
    assert result.returncode == 2
    assert "--prot" in result.stderr
    assert not units.exists()
    result = omlx("service", "status", "--unit-dir", str(units), "--port", "80", home=tmp_path / "home")
    assert result.returncode == 2
