"""/admin/...: the console's pages and their htmx actions."""
from django.urls import path

from admin_panel.views import auth, chat, logs, status

app_name = "admin_panel"

urlpatterns = [
    path("", auth.index, name="index"),
    path("login/", auth.login, name="login"),
    path("logout/", auth.logout, name="logout"),
    path("status/", status.status, name="status"),
    path("chat/", chat.chat, name="chat"),
    path("logs/", logs.logs, name="logs"),
]
