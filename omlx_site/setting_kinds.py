"""The kinds of omlx's settings (omlx_site/config.py's table): how the text of a flag or an
environment variable, or a JSON value of settings.json, becomes a setting's value."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cache.sizes import parse_size


@dataclass(frozen=True)
class Kind:
    """How values of one kind are read: ``parse`` takes the text of a flag or environment variable,
    or a JSON value from settings.json, and returns the value (ValueError when it is wrong);
    ``text`` writes a value back as an environment variable; ``json`` as a settings.json value."""

    name: str
    parse: Callable[[Any], Any]
    metavar: str = "VALUE"
    text: Callable[[Any], str] = str
    json: Callable[[Any], Any] = lambda value: value


def _integer(raw):
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            raise ValueError(f"{raw!r} is not an integer") from None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    raise ValueError(f"{raw!r} is not an integer")


def _number(raw):
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    raise ValueError(f"{raw!r} is not a number")


def _integer_or_off(raw):
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("off", "none", "")):
        return None
    return _integer(raw)


def _text(raw):
    if not isinstance(raw, str):
        raise ValueError(f"{raw!r} is not a string")
    return raw


def _boolean(raw):
    if isinstance(raw, bool):
        return raw
    text = raw.strip().lower() if isinstance(raw, str) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{raw!r} is not true or false")


def _bytes(raw):
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise ValueError(f"{raw!r} is not a size")
    return parse_size(raw.strip() if isinstance(raw, str) else raw, "size")


def _size_text(raw):
    """A size kept as written ("10%" is a share of the RAM of the machine that runs the model)."""
    _bytes(raw)
    return raw.strip() if isinstance(raw, str) else raw


def _paths(raw):
    if isinstance(raw, str):
        parts = raw.split(os.pathsep)
    elif isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        parts = raw
    else:
        raise ValueError(f"{raw!r} is not a list of folders")
    return [Path(p).expanduser().resolve() for p in parts if p]


def _folder_or_off(raw):
    text = _text(raw).strip()
    return None if text.lower() in ("off", "none") else Path(text).expanduser()


def _auto_folder_or_off(raw):
    text = _text(raw).strip()
    return "auto" if text.lower() == "auto" else _folder_or_off(text)


def _file(raw):
    text = _text(raw).strip()
    return Path(text).expanduser().resolve() if text else None


INTEGER = Kind("integer", _integer, "N")
NUMBER = Kind("number", _number, "N")
INTEGER_OR_OFF = Kind(
    "integer or off",
    _integer_or_off,
    "N|off",
    text=lambda v: "off" if v is None else str(v),
    json=lambda v: "off" if v is None else v,
)
TEXT = Kind("text", _text, "TEXT")
BOOLEAN = Kind("boolean (true/false)", _boolean, "BOOL", text=lambda v: "true" if v else "false")
BYTES = Kind("size (bytes, 512MB, 4GiB)", _bytes, "SIZE")
SIZE = Kind("size (bytes, 4GiB or % of RAM)", _size_text, "SIZE")
MEMORY_LIMIT = Kind("memory limit (size, % of RAM or disabled)", _text, "LIMIT")
FOLDERS = Kind(
    "folders", _paths, "DIR", text=lambda v: os.pathsep.join(map(str, v)), json=lambda v: [str(p) for p in v]
)
FOLDER_OR_OFF = Kind(
    "folder or off",
    _folder_or_off,
    "DIR",
    text=lambda v: "off" if v is None else str(v),
    json=lambda v: "off" if v is None else str(v),
)
AUTO_FOLDER_OR_OFF = Kind(  # "auto" stays "auto": the user of the setting knows where to look
    "auto, folder or off",
    _auto_folder_or_off,
    "auto|off|DIR",
    text=lambda v: "off" if v is None else str(v),
    json=lambda v: "off" if v is None else str(v),
)
FILE = Kind("file", _file, "FILE", json=str)
