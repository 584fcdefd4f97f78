"""The REST API: OpenAI-compatible routes (django-ninja), mounted by inference/urls.py."""
