"""One row of the settings table (omlx_site/setting_table.py): a setting's key, variable, flag,
kind, check, default and help, and when a change made while the server runs takes effect."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from omlx_site.setting_kinds import Kind

SERVE, BOTH = ("serve",), ("serve", "worker")


@dataclass(frozen=True)
class Setting:
    """One row of the table. ``default`` may be a function of OMLX_HOME; ``shown_default`` is how
    the documentation and --help write it. ``commands`` lists the commands with the flag."""

    key: str
    env: str
    kind: Kind
    default: Any
    help: str
    flag: Optional[str] = None
    commands: tuple = ("serve",)
    check: Optional[Callable[[Any], None]] = None
    shown_default: Optional[str] = None
    metavar: Optional[str] = None
    secret: bool = False
    # False: the console's Settings page shows it read-only and refuses to change it (it starts
    # processes or decides who may queue work: only the command line or settings.json set it).
    console_editable: bool = True
    # When a change made while the server runs (the console's Settings page) takes effect: "now"
    # (read at use time: omlx_site/live_settings.py applies it), "next load" (models loaded after
    # the change get it) or "restart".
    applies: str = "restart"

    def parse(self, raw):
        value = self.kind.parse(raw)
        if value is not None and self.check is not None:
            self.check(value)
        return value

    def default_for(self, home: Path):
        return self.default(home) if callable(self.default) else self.default

    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        return "unset" if self.default is None else str(self.default)

    def describe(self) -> dict:
        """Plain data about the setting (for the admin panel and the docs)."""
        return {
            "key": self.key,
            "env": self.env,
            "flag": self.flag,
            "type": self.kind.name,
            "default": self.default_text(),
            "help": self.help,
            "commands": list(self.commands),
            "secret": self.secret,
            "applies": self.applies,
            "console_editable": self.console_editable,
        }
