"""Login with the --api-key or a created key with the admin scope, logout, and /admin/ itself
(the Status page). Failed logins count against the client's address (inference/keys/throttle.py)."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods, require_POST

from admin_panel.auth import admin_required, check_key, is_authenticated, key_required, log_in, log_out
from inference.keys.throttle import get_throttle


@admin_required
def index(request):
    return HttpResponseRedirect(reverse("admin_panel:index") + "status/")


@csrf_protect
@require_http_methods(["GET", "POST"])
def login(request):
    target = request.POST.get("next") or request.GET.get("next") or reverse("admin_panel:index")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("admin_panel:index")
    if not key_required() or (request.method == "GET" and is_authenticated(request.session)):
        return HttpResponseRedirect(target)
    error, status, wait = None, 200, 0
    if request.method == "POST":
        throttle = get_throttle()
        address = request.META.get("REMOTE_ADDR")
        wait = throttle.retry_after(address)
        if wait:
            error, status = f"Too many failed logins from this address: try again in {wait} s.", 429
        else:
            opened = check_key(request.POST.get("api_key", ""))
            if opened:
                log_in(request.session, None if opened is True else opened)
                return HttpResponseRedirect(target)
            throttle.fail(address)
            error, status = "That is not the server's API key or a key with the admin scope.", 401
    response = render(request, "admin_panel/login.html", {"next": target, "error": error}, status=status)
    if wait:
        response["Retry-After"] = str(wait)
    return response


@require_POST
@csrf_protect
def logout(request):
    log_out(request.session)
    return HttpResponseRedirect(reverse("admin_panel:login"))
