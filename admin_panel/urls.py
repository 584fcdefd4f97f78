"""/admin/...: the console's pages and their htmx actions."""
from django.urls import path

from admin_panel.views import auth, benchmark, chat, logs, status

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
]
