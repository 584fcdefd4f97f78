"""Who may use the console: anyone when omlx runs without an API key (`--api-key`), else a browser
session that logged in with the key (admin_panel/views/auth.py).

The session keeps a digest of the key it logged in with, not a flag: a new key (a restart with
another `--api-key`) ends every login made with the old one.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.csrf import csrf_protect

SESSION_KEY = "omlx_admin_key"


def key_required() -> bool:
    return bool(settings.OMLX_API_KEY)


def _digest(key: str) -> str:
    return hashlib.sha256(("omlx-admin:" + key).encode()).hexdigest()


def check_key(given: str) -> bool:
    expected = settings.OMLX_API_KEY
    return not expected or hmac.compare_digest(given.encode(), expected.encode())


def log_in(session) -> None:
    session.cycle_key()  # a new session id at login (no fixation)
    session[SESSION_KEY] = _digest(settings.OMLX_API_KEY or "")


def log_out(session) -> None:
    session.flush()


def is_authenticated(session) -> bool:
    """Synchronous (the session may read the database): consumers call it through
    ``database_sync_to_async``."""
    if not key_required():
        return True
    if session is None:
        return False
    stored = session.get(SESSION_KEY)
    return bool(stored) and hmac.compare_digest(stored, _digest(settings.OMLX_API_KEY))


def admin_required(view):
    """Page and action views of the console: CSRF-checked; without a login, a redirect to the login
    page (htmx requests get a 401 whose HX-Redirect sends the whole page there)."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if not is_authenticated(request.session):
            target = reverse("admin_panel:login") + "?" + urlencode({"next": request.get_full_path()})
            if request.headers.get("HX-Request"):
                response = HttpResponse("Log in again", status=401)
                response["HX-Redirect"] = target
                return response
            return HttpResponseRedirect(target)
        return view(request, *args, **kwargs)

    return csrf_protect(wrapped)
