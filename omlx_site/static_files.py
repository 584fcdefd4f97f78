"""Static files (/static/...): the admin console's CSS and htmx (from django-htmx's package).

Daphne serves no files and omlx runs without a front proxy, so Django serves them, from the same
places `collectstatic` would read (the project's static/ and each app's static/). Files are cached
by the browser for an hour; nothing outside those folders is reachable (finders check the path).
"""

from __future__ import annotations

import mimetypes

from django.contrib.staticfiles import finders
from django.http import FileResponse, Http404
from django.views.decorators.http import require_GET


@require_GET
def serve(request, path: str):
    parts = path.split("/")
    if "\x00" in path or ".." in parts or path.startswith("/"):
        raise Http404("no such static file")
    found = finders.find(path)
    if not found:
        raise Http404("no such static file")
    content_type, encoding = mimetypes.guess_type(found)
    response = FileResponse(open(found, "rb"), content_type=content_type or "application/octet-stream")
    if encoding:
        response.headers["Content-Encoding"] = encoding
    response.headers["Cache-Control"] = "max-age=3600"
    return response
