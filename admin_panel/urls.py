"""/admin/...: the console's pages and their htmx actions."""
from django.urls import path

from admin_panel.views import auth

app_name = "admin_panel"

urlpatterns = [
    path("", auth.index, name="index"),
    path("login/", auth.login, name="login"),
    path("logout/", auth.logout, name="logout"),
]
