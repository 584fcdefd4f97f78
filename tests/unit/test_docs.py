"""Every setting is documented: docs/settings.md is the table of omlx_site/config.py as generated
now, every row has its help, default and type, and each OMLX_* environment variable the code reads
and each flag of `omlx serve` and `omlx worker` appears in README.md or docs/settings.md."""

import re
import subprocess
import sys
from pathlib import Path

from omlx_site import config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SETTINGS_MD = (ROOT / "docs" / "settings.md").read_text()
DOCS = README + SETTINGS_MD


def test_docs_settings_md_is_the_generated_table():
    generated = subprocess.run(
        [sys.executable, "-m", "omlx_site.config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    ).stdout
    assert SETTINGS_MD == generated, (
        "docs/settings.md is stale: python -m omlx_site.config > docs/settings.md"
    )
    assert "(docs/settings.md)" in README


def test_every_setting_has_a_row_with_its_names_default_and_help():
    assert len(config.SETTINGS) >= 20 and len(config.BY_KEY) == len(config.SETTINGS)
    rows = {line.split("|")[1].strip(): line for line in SETTINGS_MD.splitlines() if line.startswith("| `")}
    for setting in config.SETTINGS:
        assert setting.help and setting.env.startswith("OMLX_"), setting
        row = rows[f"`{setting.key}`"]
        assert f"`{setting.env}`" in row and setting.help.replace("|", "\\|") in row
        assert f"`{setting.default_text()}`" in row and setting.kind.name in row
        if setting.flag:
            assert f"`{setting.flag}`" in row
            assert setting.flag == "--" + setting.key.replace("_", "-")  # the file key is the flag's name
    assert len({s.env for s in config.SETTINGS}) == len(config.SETTINGS)


def test_every_environment_variable_is_documented():
    names = set()
    for package in ("omlx_site", "inference", "cache", "admin_panel"):
        for path in (ROOT / package).rglob("*.py"):
            names.update(re.findall(r"environ(?:\.get)?[\[(]\"(OMLX_[A-Z_]+)\"", path.read_text()))
    names.update(s.env for s in config.SETTINGS)
    assert "OMLX_HOME" in names and "OMLX_REDIS_URL" in names  # the scan works
    missing = sorted(name for name in names if f"`{name}`" not in DOCS)
    assert not missing, f"undocumented in README.md and docs/settings.md: {missing}"


def test_every_serve_and_worker_flag_is_documented():
    for command in ("serve", "worker"):
        help_text = subprocess.run(
            [sys.executable, "-m", "omlx_site.cli", command, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        ).stdout
        flags = set(re.findall(r"(--[a-z][a-z-]+)", help_text)) - {"--help"}
        assert "--redis-url" in flags
        missing = sorted(flag for flag in flags if f"`{flag}" not in DOCS)
        assert not missing, f"omlx {command} flags undocumented in README.md and docs/settings.md: {missing}"
