"""`omlx worker`: a Huey consumer for the Redis queue of `omlx serve --redis-url`, in this process.

It loads models itself (the registry is built from the same settings as the server's: model
folder, concurrency, cache), runs each request on the model's engine and publishes the tokens to the
channel layer (Redis pub/sub), where the server's view reads them. On SIGINT or SIGTERM it stops
taking tasks, closes the engines (running requests end with "abort", which the server's views
receive), sends what is left and exits 0.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal

from omlx_site import json_log

logger = logging.getLogger("omlx.worker")


def run_worker(threads: int = 2) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "omlx_site.settings")
    json_log.name_process(json_log.worker_process_name())
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 PID` prints every thread's stack
        faulthandler.register(signal.SIGUSR1, all_threads=True)

    # Django, Huey, the apps and the pool load here, once DJANGO_SETTINGS_MODULE is set: they need
    # django.setup() first, and every `omlx` command imports this module.
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)  # the cold tier's rows (idempotent)

    from django.utils.module_loading import autodiscover_modules
    from huey.contrib.djhuey import HUEY

    from inference.dispatch import relay, worker_presence
    from inference.pool import close_pool, get_pool

    autodiscover_modules("tasks")
    registry = get_pool()
    logger.info(
        "worker %d: models in %s: %s",
        os.getpid(),
        os.pathsep.join(map(str, registry.model_dirs)),
        ", ".join(registry.models()),
    )
    for model_id in registry.load_pinned():
        logger.info("pinned model %s loaded", model_id)
    from inference.pool.memory_guard import start_guard, stop_guard  # as above

    start_guard(registry)
    # SIGINT and SIGTERM both stop at once: a request can last minutes, its client waits; the
    # engines abort what runs and the views learn it.
    consumer = HUEY.create_consumer(
        workers=threads,
        worker_type="thread",
        periodic=True,
        initial_delay=0.1,
        backoff=1.15,
        max_delay=1.0,
        check_worker_health=True,
    )
    # Announced (its first heartbeat written) before it says it takes requests: the consumer's
    # threads announce it too, but only once running, and a server checks for a live worker first.
    worker_presence.start_heartbeat()
    print(f"omlx worker {os.getpid()} taking requests from {_redacted(settings.OMLX_REDIS_URL)}", flush=True)
    try:
        consumer.run()
    finally:
        worker_presence.stop_heartbeat()
        stop_guard()
        close_pool()
        relay.flush(5.0)
        print("omlx worker stopped", flush=True)
    return 0


def _redacted(url: str) -> str:
    """The URL without its password."""
    if "@" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
