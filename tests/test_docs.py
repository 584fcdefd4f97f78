"""The README documents every setting: each OMLX_* environment variable the code reads, and each
flag of `omlx serve` and `omlx worker`."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_environment_variable_is_in_the_readme():
    names = set()
    for package in ("omlx_site", "inference", "cache", "admin_panel"):
        for path in (ROOT / package).rglob("*.py"):
            names.update(re.findall(r"environ(?:\.get)?[\[(]\"(OMLX_[A-Z_]+)\"", path.read_text()))
    assert "OMLX_REDIS_URL" in names  # the scan works
    missing = sorted(name for name in names if f"`{name}`" not in README)
    assert not missing, f"undocumented in README.md: {missing}"


def test_every_serve_and_worker_flag_is_in_the_readme():
    for command in ("serve", "worker"):
        help_text = subprocess.run([sys.executable, "-m", "omlx_site.cli", command, "--help"],
                                   capture_output=True, text=True, timeout=120, cwd=ROOT).stdout
        flags = set(re.findall(r"(--[a-z][a-z-]+)", help_text)) - {"--help"}
        assert "--redis-url" in flags
        missing = sorted(flag for flag in flags if f"`{flag}" not in README)
        assert not missing, f"omlx {command} flags undocumented in README.md: {missing}"
