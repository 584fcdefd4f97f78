"""/admin/...: the console's pages and their htmx actions."""

from django.urls import path

from admin_panel.views import auth, benchmark, chat, downloads, integrations, keys, logs, status
from admin_panel.views import cache as cache_views
from admin_panel.views import models as models_views
from admin_panel.views import settings as settings_views

app_name = "admin_panel"

urlpatterns = [
    path("", auth.index, name="index"),
    path("login/", auth.login, name="login"),
    path("logout/", auth.logout, name="logout"),
    path("status/", status.status, name="status"),
    path("chat/", chat.chat, name="chat"),
    path("logs/", logs.logs, name="logs"),
    path("benchmark/", benchmark.page, name="benchmark"),
    path("benchmark/runs/<int:run_id>/", benchmark.run_detail, name="benchmark_run"),
    path("benchmark/runs/<int:run_id>/delete/", benchmark.run_delete, name="benchmark_delete"),
    path("benchmark/compare/", benchmark.compare, name="benchmark_compare"),
    path("models/", models_views.page, name="models"),
    path("models/table/", models_views.table, name="models_table"),
    path("models/action/", models_views.action, name="models_action"),
    path("cache/", cache_views.page, name="cache"),
    path("cache/panel/", cache_views.panel, name="cache_panel"),
    path("cache/action/", cache_views.action, name="cache_action"),
    path("cache/probe/", cache_views.probe, name="cache_probe"),
    path("settings/", settings_views.page, name="settings"),
    path("settings/save/", settings_views.save, name="settings_save"),
    path("settings/restart/", settings_views.restart_view, name="settings_restart"),
    path("downloads/", downloads.page, name="downloads"),
    path("downloads/action/", downloads.action, name="downloads_action"),
    path("integrations/", integrations.page, name="integrations"),
    path("keys/", keys.page, name="keys"),
    path("keys/action/", keys.action, name="keys_action"),
]
