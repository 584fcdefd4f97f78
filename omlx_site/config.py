"""The table of omlx's settings, and where their values come from.

Each `Setting` row (the table is omlx_site/setting_table.py) gives a setting's key in
``$OMLX_HOME/settings.json``, its environment variable (also the name of the Django setting that
holds its value), its `omlx serve` / `omlx worker` flag, its kind (how a value is parsed:
omlx_site/setting_kinds.py), the check of its value (omlx_site/setting_checks.py), default and
help. The CLI's flags, omlx_site.settings, docs/settings.md (``python -m omlx_site.config >
docs/settings.md``) and tests/unit/test_docs.py are all built from `SETTINGS`: adding a setting is
adding one row.

Precedence: a flag on the command line, then the environment variable, then settings.json, then the
default. `omlx serve` writes the flags it was given to settings.json (mode 0600: it may hold the
API key), so the next start without them keeps them. A settings.json that is not a JSON object is
moved aside (settings.json.corrupt-<time>) with a warning; a key with a bad value is ignored with a
warning; unknown keys are kept in the file and warned about. Upstream oMLX's nested settings.json
(same path) is converted on first read (omlx_site/upstream_settings.py).

Adding a setting: append a `Setting` row to `SETTINGS` in omlx_site/setting_table.py (key = the
flag's name with underscores; ``commands`` = the commands that get the flag, none for a
variable/file-only setting), then regenerate docs/settings.md. Its value is then
``django.conf.settings.<env>`` in every process, the flag is in --help, and `omlx serve` saves it
when given.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from omlx_site import redis_policy, upstream_settings
from omlx_site.setting_row import BOTH, SERVE, Setting  # noqa: F401
from omlx_site.setting_table import BY_KEY, SETTINGS
from omlx_site.setting_kinds import (  # noqa: F401  (config.BOOLEAN etc. are used elsewhere)
    BOOLEAN,
    BYTES,
    FILE,
    FOLDER_OR_OFF,
    FOLDERS,
    INTEGER,
    MEMORY_LIMIT,
    NUMBER,
    SIZE,
    TEXT,
    Kind,
)

logger = logging.getLogger("omlx.settings")


def home() -> Path:
    return Path(os.environ.get("OMLX_HOME") or Path.home() / ".omlx").expanduser()


def settings_file(omlx_home: Optional[Path] = None) -> Path:
    return (omlx_home or home()) / "settings.json"


_warned: set = set()


def _warn(message: str) -> None:
    # Logging is not configured yet when Django's settings load: stderr, once per process (the CLI
    # and then omlx_site.settings read the file in the same process).
    if message not in _warned:
        _warned.add(message)
        print(f"omlx: warning: {message}", file=sys.stderr, flush=True)


def read_file(path: Path, warn: Callable[[str], None] = _warn) -> dict:
    """settings.json as a dict ({} when absent). One that is not a JSON object is moved aside."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:  # unreadable (a folder, no permission): left where it is
        warn(f"{path}: cannot be read ({exc}); using the defaults")
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        data, reason = None, f"not JSON ({exc})"
    else:
        reason = "not a JSON object"
    if isinstance(data, dict):
        if upstream_settings.is_upstream(data):  # upstream oMLX's nested file at the same path
            return upstream_settings.adopt(path, data, BY_KEY, warn, _write)
        return data
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:  # another process moved it first
        return {}
    warn(f"{path}: {reason}; moved to {aside}, using the defaults")
    return {}


def resolve(
    omlx_home: Optional[Path] = None,
    cli: Optional[Mapping[str, Any]] = None,
    environ: Optional[Mapping[str, str]] = None,
    warn: Callable[[str], None] = _warn,
) -> dict:
    """Every setting's (value, source) by key; source is "flag", "environment", "file" or "default".
    ``cli`` holds values already parsed (None: the flag was given empty, the default applies). A bad
    environment variable raises ValueError naming it; a bad value in the file is ignored with a
    warning."""
    omlx_home = omlx_home or home()
    environ = os.environ if environ is None else environ
    cli = cli or {}
    path = settings_file(omlx_home)
    stored = read_file(path, warn)
    unknown = sorted(set(stored) - set(BY_KEY))
    if unknown:
        warn(f"{path}: unknown settings {', '.join(unknown)} (kept in the file, not used)")
    resolved = {}
    for setting in SETTINGS:
        if setting.key in cli:  # None: given empty, back to the default
            value = cli[setting.key]
            resolved[setting.key] = (setting.default_for(omlx_home) if value is None else value, "flag")
            continue
        raw = environ.get(setting.env)
        if raw:  # an empty variable counts as unset
            try:
                resolved[setting.key] = (setting.parse(raw), "environment")
            except ValueError as exc:
                raise ValueError(f"{setting.env}={raw!r}: {exc}") from None
            continue
        if stored.get(setting.key) is not None:
            try:
                resolved[setting.key] = (setting.parse(stored[setting.key]), "file")
                continue
            except ValueError as exc:
                warn(f"{path}: {setting.key}: {exc}; ignored, using the default")
        resolved[setting.key] = (setting.default_for(omlx_home), "default")
    return resolved


def load(
    omlx_home: Optional[Path] = None,
    cli: Optional[Mapping[str, Any]] = None,
    environ: Optional[Mapping[str, str]] = None,
    warn: Callable[[str], None] = _warn,
) -> dict:
    """Every setting's value by key: ``cli``, then the environment, then settings.json, then the
    default (see `resolve`)."""
    return {key: value for key, (value, _) in resolve(omlx_home, cli, environ, warn).items()}


# How this process was started by `omlx serve` (omlx_site/cli.py): the flags it was given and the
# environment before they were exported into it, so that `describe` tells a flag from a variable.
_launch: dict = {"flags": {}, "environ": None}


def remember_launch(flags: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    _launch.update(flags=dict(flags), environ=dict(environ))


def launch_flags() -> dict:
    """The settings `omlx serve` was given as flags (by key; None: given empty)."""
    return dict(_launch["flags"])


def launch_environ() -> Optional[dict]:
    """The environment `omlx serve` started with (None: this process was not started by it)."""
    return None if _launch["environ"] is None else dict(_launch["environ"])


def describe(omlx_home: Optional[Path] = None) -> list:
    """Each setting as plain data with its current value (as written in settings.json) and where it
    comes from, for this process's flags and starting environment (the admin panel); a secret's
    value is shown as "***"."""
    resolved = resolve(omlx_home, cli=_launch["flags"], environ=_launch["environ"])
    rows = []
    for key, (value, source) in resolved.items():
        setting = BY_KEY[key]
        shown = setting.kind.json(value) if value is not None else None
        if setting.secret and value:
            shown = "***"
        rows.append({**setting.describe(), "value": shown, "source": source})
    return rows


def check_together(values: Mapping[str, Any]) -> None:
    """ValueError when settings that are each right cannot go together (every value by key)."""
    if values["workers"] == 0 and not values["redis_url"] and values["api_handoff"] == "huey":
        raise ValueError(
            "--workers 0 needs --redis-url (without Redis only the server's own workers can run requests)"
        )
    from omlx_site.boundary import network_refusal  # Django's host matching: when checked

    refusal = network_refusal(values)
    if refusal:
        raise ValueError(refusal)
    redis_policy.check(values)


def save(values: Mapping[str, Any], omlx_home: Optional[Path] = None) -> Path:
    """Write these settings (by key) into settings.json, keeping the others there (mode 0600); a
    value None removes its key."""
    path = settings_file(omlx_home)
    stored = read_file(path)
    for key, value in values.items():
        if value is None:
            stored.pop(key, None)
        else:
            stored[key] = BY_KEY[key].kind.json(value)
    _write(path, stored)
    return path


def _write(path: Path, stored: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(stored, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # readers see the old file or the new one, never a part
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def export(values: Mapping[str, Any], omlx_home: Optional[Path] = None) -> None:
    """Put these settings (by key) into the environment, where omlx_site.settings and the processes
    started from this one (`manage.py run_huey`) read them. None (a flag given empty) exports the
    default; with no default the variable is removed."""
    for key, value in values.items():
        setting = BY_KEY[key]
        if value is None:
            value = setting.default_for(omlx_home or home())
        if value is None:
            os.environ.pop(setting.env, None)
        else:
            os.environ[setting.env] = setting.kind.text(value)


def add_flags(parser, command: str) -> None:
    """The flags of ``command``'s settings, all defaulting to None (= not given)."""
    for s in SETTINGS:
        if s.flag and command in s.commands:
            kwargs = {"action": "append"} if s.kind is FOLDERS else {}
            if s.kind is BOOLEAN:  # --memory-guard alone is --memory-guard true
                kwargs = {"nargs": "?", "const": "true"}
            parser.add_argument(
                s.flag,
                dest=s.key,
                default=None,
                metavar=s.metavar or s.kind.metavar,
                help=f"{s.help} (default {s.default_text()}; ${s.env})".replace("%", "%%"),
                **kwargs,
            )


def flag_values(parser, args, command: str) -> dict:
    """The settings given as flags, parsed and checked (parser.error names a bad flag); a flag
    given empty (--api-key '') maps to None: back to the default."""
    given = {}
    for s in SETTINGS:
        if not (s.flag and command in s.commands):
            continue
        raw = getattr(args, s.key)
        if raw is None:
            continue
        if s.kind is FOLDERS:
            raw = os.pathsep.join(raw)
        if raw.strip() == "":
            given[s.key] = None
            continue
        try:
            given[s.key] = s.parse(raw)
        except ValueError as exc:
            parser.error(f"{s.flag} {raw}: {exc}")
    return given


def markdown() -> str:
    """docs/settings.md: the table, generated (tests/unit/test_docs.py checks the file is up to date)."""
    lines = [
        "# Settings",
        "",
        "<!-- Generated by `python -m omlx_site.config > docs/settings.md` from omlx_site/setting_table.py;",
        "     tests/unit/test_docs.py fails when this file differs. -->",
        "",
        "Every setting can be given as a flag (where it has one), an environment variable or a key of",
        "`$OMLX_HOME/settings.json` (`~/.omlx/settings.json`). A flag wins over the variable, the",
        "variable over the file, the file over the default. `omlx serve` writes the flags it is given",
        "to the file (mode 0600, since it may hold the API key), so they stay in force at the next",
        "start; a flag given empty (`--api-key ''`) removes its key from the file, and the default",
        "applies. `omlx worker` reads the file but does not write it. A file that is not a JSON object is",
        "moved aside to `settings.json.corrupt-<time>` with a warning; a key whose value is wrong is",
        "ignored with a warning; unknown keys are kept and warned about. A wrong environment variable",
        "stops the command with a message naming it. An empty variable counts as unset. A true/false",
        "flag given alone (`--allow-remote-images`) means true.",
        "",
        "The console's Settings page (`/admin/settings/`, docs/admin.md) shows each setting's value and",
        "source and saves changes to the same file. *applies* says when a change made there takes",
        "effect in the running server: `now`, `next load` (models loaded after the change) or",
        "`restart` (the page's Restart button). Settings that start processes, decide who may queue",
        "work or what the server lets in (*applies* `not from the console`: the MCP servers, Redis,",
        "the allowed hosts and origins, auth on a network, image sources) are shown read-only there",
        "and can be changed only on the command line, in the environment or in settings.json",
        "(docs/security.md).",
        "",
        "| settings.json key | flag | environment variable | type | default | applies | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        flag = f"`{s.flag}`" + (" (serve, worker)" if len(s.commands) > 1 else "") if s.flag else "none"
        help_text = s.help.replace("|", "\\|")
        applies = s.applies if s.console_editable else f"{s.applies}; not from the console"
        lines.append(
            f"| `{s.key}` | {flag} | `{s.env}` | {s.kind.name} | `{s.default_text()}` | {applies} "
            f"| {help_text} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
