"""`omlx serve`: migrate, start the embedded Huey consumer, serve the ASGI app with Daphne, and
close everything on SIGINT/SIGTERM."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import threading

from inference import lifecycle
from omlx_site import json_log

logger = logging.getLogger("omlx.server")


def serve(host: str = "127.0.0.1", port: int = 8000) -> int:
    """Serve until SIGINT/SIGTERM. Settings come from the environment (the CLI exports its flags
    there, so that `manage.py run_huey` and `omlx worker` processes can share them)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")
    json_log.name_process("server")
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID` prints every thread's stack (a stuck server)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    # A process started in the background by a non-interactive shell inherits SIGINT ignored, and
    # Twisted then leaves it ignored: SIGINT stops the server however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    # Django, the apps, the pool and Daphne load here, once DJANGO_SETTINGS_MODULE is set: the apps
    # need django.setup() first, and `omlx` commands that do not serve import this module too.
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    from inference.keys.ring import ensure_stamp, get_ring

    ensure_stamp()
    get_ring().reload()  # the keys (inference/keys/): read once here, then when they change
    from admin_panel.tasks import fail_interrupted_runs

    if fail_interrupted_runs():
        logger.warning("benchmark runs left unfinished by the last server were marked failed (interrupted)")
    from inference.api.responses.store import delete_expired

    expired = delete_expired()  # then every hour (inference/tasks.py)
    if expired:
        logger.info(
            "deleted %d stored responses older than %g days", expired, settings.OMLX_RESPONSE_TTL_DAYS
        )

    from inference.dispatch import get_backend
    from inference.pool import close_pool, get_pool

    registry = get_pool()
    models = registry.models()
    logger.info("models in %s: %s", os.pathsep.join(map(str, registry.model_dirs)), ", ".join(models))
    # Pinned models load once the server listens; until then GET /health answers 503 "starting".
    backend = get_backend()
    load_pinned = backend.runs_models  # inference runs here
    if load_pinned:
        lifecycle.begin_start()

    consumer = backend.start_consumer()
    from admin_panel.history import get_history  # after django.setup(), as above

    get_history()  # the admin Status page's charts start now (a daemon thread, a point every 5 s)
    mcp = _start_mcp()
    if load_pinned:  # models run in this process: watch its memory while serving
        from inference.pool.memory_guard import start_guard  # when serving, as above

        start_guard(registry)
    if backend.networked:
        logger.info(
            "queue and channel layer in Redis; %d worker threads in this process%s",
            settings.OMLX_HUEY_WORKERS,
            "" if consumer else " (run `omlx worker`)",
        )

    from daphne.server import Server  # installs Twisted's asyncio reactor: import it first
    from twisted.internet import reactor

    from omlx_site.asgi import application
    from omlx_site.shutdown import GracefulShutdown

    def announce():
        def say():
            if not server.listening_addresses:
                reactor.stop()  # the listen failed (Daphne logged why)
                return
            bound_host, bound_port = server.listening_addresses[0]
            # A wildcard address is no Host a browser may send (omlx_site/boundary.py): loopback.
            wildcard = host.strip() in ("", "0.0.0.0", "::")
            shown = "127.0.0.1" if wildcard else f"[{host}]" if ":" in host else host
            from omlx_site.boundary import LOOPBACK_HOSTS  # after django.setup(), as above

            others = [name for name in settings.ALLOWED_HOSTS if name not in LOOPBACK_HOSTS]
            names = ", ".join(others) or "none: --allowed-hosts names them"
            # One write per line: print() writes the text and the newline apart when stdout is
            # unbuffered, and a child's output (a stdio MCP server's log) can land in between.
            sys.stdout.write(
                f"omlx serving http://{shown}:{bound_port}\n"
                + (f"listening on every address; other machines' names for it: {names}\n" if wildcard else "")
                + f"admin console: http://{shown}:{bound_port}/admin/\n"
            )
            sys.stdout.flush()

        reactor.callWhenRunning(say)
        if load_pinned:
            reactor.callWhenRunning(
                lambda: threading.Thread(
                    target=_load_pinned, args=(registry,), name="omlx-pinned", daemon=True
                ).start()
            )
        # SIGTERM / SIGINT drain the running requests first (after Twisted installed its handlers).
        reactor.callWhenRunning(
            GracefulShutdown(reactor, server, settings.OMLX_SHUTDOWN_GRACE_SECONDS).install
        )
        # New requests get a 503 from the moment the shutdown starts.
        reactor.addSystemEventTrigger("before", "shutdown", lifecycle.start_shutdown)

    interface = host.replace(":", r"\:")
    server = Server(
        application,
        endpoints=[f"tcp:port={port}:interface={interface}"],
        signal_handlers=True,
        ready_callable=announce,
        verbosity=0,
    )
    try:
        server.run()
    finally:
        lifecycle.start_shutdown()
        if mcp is not None:  # the MCP servers stop with omlx (a stdio server's process ends)
            from inference.mcp import manager  # when serving, as above

            manager.stop()
        if consumer is not None:
            consumer.stop(graceful=True, timeout=5.0)
        from admin_panel.downloads import close_downloads  # after django.setup(), as above

        close_downloads()  # the console's downloads stop as on a cancel: Resume continues them
        from inference.pool.memory_guard import stop_guard  # when serving, as above

        stop_guard()
        close_pool()
        backend.close()
        print("omlx stopped", flush=True)
    if not server.listening_addresses:
        print(f"omlx: cannot listen on {host}:{port}", file=sys.stderr, flush=True)
        return 1
    return 0


def _start_mcp():
    """The MCP servers of --mcp-config, started in the background (they come up while omlx
    listens; GET /v1/mcp/servers shows each one's state). None when none are configured."""
    from django.conf import settings  # when serving, as in serve()

    if not settings.OMLX_MCP_CONFIG:
        return None
    from inference.mcp import config as mcp_config  # when serving, as in serve()
    from inference.mcp import manager

    try:
        specs = mcp_config.load(settings.OMLX_MCP_CONFIG)
    except ValueError as exc:  # the file changed since the settings were checked: serve without MCP
        logger.error("MCP servers not started: %s", exc)
        return None
    logger.info(
        "MCP servers from %s: %s", settings.OMLX_MCP_CONFIG, ", ".join(s.name for s in specs) or "none"
    )
    return manager.start(specs, tool_timeout=settings.OMLX_MCP_TOOL_TIMEOUT, log_dir=settings.OMLX_LOG_DIR)


def _load_pinned(registry) -> None:
    try:
        for model_id in registry.load_pinned():
            logger.info("pinned model %s loaded", model_id)
    finally:
        lifecycle.end_start()
    logger.info("ready (GET /health answers 200)")
