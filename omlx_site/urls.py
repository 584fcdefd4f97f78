"""Every HTTP route of omlx, in one list (the REST API and admin pages join it in later issues)."""
from django.urls import path

urlpatterns: list = []
