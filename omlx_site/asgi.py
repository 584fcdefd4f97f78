"""ASGI entry point: HTTP through Django, websockets through Channels (served by Daphne).

Both go through the browser boundary first (omlx_site/boundary.py): a Host that is not one of the
server's names, a state-changing request or a websocket from another site's page, a /v1 body that
is not JSON are refused before anything else reads them. Websockets are the admin console's live
pages (admin_panel/routing.py); they carry the Django session (the console's login).
"""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")
django.setup(set_prefix=False)  # what get_asgi_application() does, with our handler below

from omlx_site.asgi_handler import PooledThreadASGIHandler  # noqa: E402

django_asgi_app = PooledThreadASGIHandler()  # Django's, with request threads reused

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402  (needs Django set up)
from channels.sessions import SessionMiddlewareStack  # noqa: E402

from admin_panel.routing import websocket_urlpatterns  # noqa: E402
from omlx_site.body_limit import BodyLimitMiddleware  # noqa: E402
from omlx_site.boundary import BrowserBoundary  # noqa: E402

application = BrowserBoundary(
    ProtocolTypeRouter(
        {
            "http": BodyLimitMiddleware(django_asgi_app),
            "websocket": SessionMiddlewareStack(URLRouter(websocket_urlpatterns)),
        }
    )
)
