"""Login with the API key, logout, and /admin/ itself (the Status page)."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.csrf import csrf_protect
from django.views.decorators.http import require_http_methods, require_POST

from admin_panel.auth import admin_required, check_key, is_authenticated, key_required, log_in, log_out


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
    error = None
    if request.method == "POST":
        if check_key(request.POST.get("api_key", "")):
            log_in(request.session)
            return HttpResponseRedirect(target)
        error = "That is not the server's API key."
    return render(
        request, "admin_panel/login.html", {"next": target, "error": error}, status=401 if error else 200
    )


@require_POST
@csrf_protect
def logout(request):
    log_out(request.session)
    return HttpResponseRedirect(reverse("admin_panel:login"))
