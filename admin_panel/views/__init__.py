"""The console's pages, one module each; auth.py has the login."""

ERROR_FRAGMENT_HEADER = "X-Omlx-Fragment"


def shows_errors(response):
    """Marks an htmx answer whose body is the fragment to show even when its status is 4xx/5xx (a
    bad value, a model that would not fit): static/admin_panel/admin.js swaps it in like a 200."""
    response[ERROR_FRAGMENT_HEADER] = "1"
    return response
