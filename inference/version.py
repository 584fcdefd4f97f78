"""omlx's version, from the installed package's metadata (pyproject.toml's ``version``). The apps own
it (omlx_site's command line reads it from here): an app never imports the project package."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version


def version() -> str:
    try:
        return package_version("omlx")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"
