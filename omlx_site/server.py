"""`omlx serve`: migrate, start the embedded Huey consumer, serve the ASGI app with Daphne, and
close everything on SIGINT/SIGTERM."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Optional

logger = logging.getLogger("omlx.server")


def serve(host: str = "127.0.0.1", port: int = 8000, model_dir=None,
          max_concurrent_requests: Optional[int] = None, api_key: Optional[str] = None) -> int:
    # Settings read these when Django sets up; exported, they also reach `manage.py run_huey`.
    if model_dir:  # one directory or a list of them
        dirs = [model_dir] if isinstance(model_dir, (str, Path)) else model_dir
        os.environ["OMLX_MODEL_DIR"] = os.pathsep.join(str(Path(d).expanduser().resolve()) for d in dirs)
    if max_concurrent_requests is not None:
        os.environ["OMLX_MAX_CONCURRENT_REQUESTS"] = str(max_concurrent_requests)
    if api_key:
        os.environ["OMLX_API_KEY"] = api_key
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")

    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)

    from inference.model_registry import close_registry, get_registry

    registry = get_registry()
    models = registry.models()
    logger.info("models in %s: %s", os.pathsep.join(map(str, registry.model_dirs)), ", ".join(models))
    for model_id in registry.load_pinned():
        logger.info("pinned model %s loaded", model_id)

    consumer = None
    if settings.OMLX_API_HANDOFF == "huey":
        from inference.huey_consumer import start_embedded_consumer

        consumer = start_embedded_consumer()

    from daphne.server import Server  # installs Twisted's asyncio reactor: import it first
    from twisted.internet import reactor

    from omlx_site.asgi import application

    def announce():
        def say():
            if not server.listening_addresses:
                reactor.stop()  # the listen failed (Daphne logged why)
                return
            bound_host, bound_port = server.listening_addresses[0]
            shown = f"[{host}]" if ":" in host else host
            print(f"omlx serving http://{shown}:{bound_port}", flush=True)

        reactor.callWhenRunning(say)

    interface = host.replace(":", r"\:")
    server = Server(application, endpoints=[f"tcp:port={port}:interface={interface}"],
                    signal_handlers=True, ready_callable=announce, verbosity=0)
    try:
        server.run()
    finally:
        if consumer is not None:
            consumer.stop(graceful=True, timeout=5.0)
        close_registry()
        print("omlx stopped", flush=True)
    if not server.listening_addresses:
        print(f"omlx: cannot listen on {host}:{port}", file=sys.stderr, flush=True)
        return 1
    return 0
