"""/admin/settings/: every row of the settings table (omlx_site/config.py) with its value, where
the value comes from (flag, environment, settings.json, default) and when a change takes effect.

A change is checked as the command line checks it (the row's kind and check, then the settings
that must go together); a bad value answers 400 with the message and nothing is saved. A good one
is written to ``$OMLX_HOME/settings.json`` (the file `omlx serve` reads; atomic), then put in force
at once where the code reads it at use time (omlx_site/live_settings.py), else the row says
"restart to apply" until the Restart button (omlx_site/restart.py) has restarted the server. A
setting given as a flag or an environment variable cannot be changed here: those win over the
file at every start. The API key is never shown, only whether one is set.

Settings that start processes, decide who may queue work or what the server lets in (rows with
``console_editable`` False: the MCP servers' commands, Redis, allowed hosts and origins, auth on a
network, image sources) are shown read-only, and a POST that tries to change
them, even one crafted by hand, answers 403: a web page must never turn the server into a
launcher (docs/security.md).
"""

from __future__ import annotations

from typing import List, Tuple

from django.conf import settings
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from admin_panel.auth import admin_required, log_in
from admin_panel.views import shows_errors
from omlx_site import config, live_settings, restart

Message = Tuple[str, str]  # ("ok" | "error", text)


class ReadOnly(ValueError):
    """A setting that the console may show but never change."""


@admin_required
@require_GET
def page(request):
    return render(request, "admin_panel/settings.html", _context([]))


@admin_required
@require_POST
def save(request):
    """Save ``value`` for the setting ``key`` (``reset``: remove it from the file: the default)."""
    messages: List[Message] = []
    try:
        _save(request, request.POST, messages)
        status = 200
    except ReadOnly as exc:
        messages.append(("error", str(exc)))
        status = 403
    except ValueError as exc:
        messages.append(("error", str(exc)))
        status = 400
    return _answer(request, messages, status)


@admin_required
@require_POST
def restart_view(request):
    if not restart.available():
        return _answer(
            request,
            [
                (
                    "error",
                    "This server was not started by `omlx serve`, so it cannot "
                    "restart itself; restart it where it was started.",
                )
            ],
            409,
        )
    restart.request()
    return render(request, "admin_panel/partials/settings_restarting.html", {})


def _save(request, form, messages: List[Message]) -> None:
    key = form.get("key", "")
    setting = config.BY_KEY.get(key)
    if setting is None:
        raise ValueError(f"{key!r} is not a setting")
    if not setting.console_editable:
        raise ReadOnly(
            f"{key} starts processes or decides who may queue work, so it can be changed only on "
            "the command line, in the environment or in settings.json, never from a web page. "
            "Nothing was saved."
        )
    rows = {row["key"]: row for row in config.describe()}
    source = rows[key]["source"]
    if source == "flag":
        raise ValueError(
            f"{key} is given as the flag {setting.flag} of `omlx serve`, which wins over "
            "settings.json at every start: change or remove the flag where omlx is started "
            "(or in the service's unit). Nothing was saved."
        )
    if source == "environment":
        raise ValueError(
            f"{key} is set by the environment variable {setting.env}, which wins over "
            "settings.json: change or unset the variable. Nothing was saved."
        )
    reset = form.get("reset") == "1"
    if reset:
        value = None
    else:
        raw = form.get("value", "").strip()
        if not raw:
            raise ValueError(f"{key}: type a value (Reset goes back to the default). Nothing was saved.")
        try:
            value = setting.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{key}: {exc}. Nothing was saved.") from None
    # What every setting would be with the change: settings that must go together are checked.
    after = config.load(cli={**_flags(), key: value}, environ=config.launch_environ())
    try:
        config.check_together(after)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}. Nothing was saved.") from None
    path = config.save({key: value})
    shown = "the default" if reset else ("the new key" if setting.secret else _text(setting, value))
    if live_settings.apply(key, after[key]):
        if key == "api_key":  # whoever changed the key keeps their login
            log_in(request.session)
        when = "for models loaded from now on" if setting.applies == "next load" else "in force now"
        messages.append(("ok", f"{key}: {shown} saved to {path}; {when}."))
    else:
        messages.append(("ok", f"{key}: {shown} saved to {path}; it applies after a restart."))


def _flags() -> dict:
    return {key: value for key, value in config.launch_flags().items() if value is not None}


def _text(setting, value) -> str:
    if value is None and setting.kind is not config.FOLDER_OR_OFF:  # a folder's None is "off"
        return ""
    return setting.kind.text(value)


def _answer(request, messages, status):
    template = (
        "admin_panel/partials/settings_table.html"
        if request.headers.get("HX-Request")
        else "admin_panel/settings.html"
    )
    return shows_errors(render(request, template, _context(messages), status=status))


def _context(messages: List[Message]) -> dict:
    at_start = getattr(settings, "OMLX_SETTINGS_AT_START", {})
    values = config.load(cli=_flags(), environ=config.launch_environ())
    rows = []
    for row in config.describe():
        setting = config.BY_KEY[row["key"]]
        value = values[row["key"]]
        started = at_start.get(row["key"], value)
        pending = setting.applies == "restart" and _json(setting, started) != _json(setting, value)
        rows.append(
            {
                **row,
                "text": "" if setting.secret else _text(setting, value),
                "is_set": value is not None,
                "in_force": "" if setting.secret else _text(setting, started),
                "pending": pending,
                "locked": row["source"] in ("flag", "environment") or not setting.console_editable,
            }
        )
    return {
        "rows": rows,
        "messages": messages,
        "file": config.settings_file(),
        "pending": [r["key"] for r in rows if r["pending"]],
        "can_restart": restart.available(),
    }


def _json(setting, value):
    return None if value is None else setting.kind.json(value)
