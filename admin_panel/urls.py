"""/admin/...: the console's pages and their htmx actions."""
from django.urls import path

from admin_panel.views import auth
from admin_panel.views import cache as cache_views
from admin_panel.views import models as models_views

app_name = "admin_panel"

urlpatterns = [
    path("", auth.index, name="index"),
    path("login/", auth.login, name="login"),
    path("logout/", auth.logout, name="logout"),
    path("models/", models_views.page, name="models"),
    path("models/table/", models_views.table, name="models_table"),
    path("models/action/", models_views.action, name="models_action"),
    path("cache/", cache_views.page, name="cache"),
    path("cache/panel/", cache_views.panel, name="cache_panel"),
    path("cache/action/", cache_views.action, name="cache_action"),
    path("cache/probe/", cache_views.probe, name="cache_probe"),
]
