from django.apps import AppConfig


class InferenceConfig(AppConfig):
    """Engine, scheduler, model loading (and later the REST API and model pool)."""

    name = "inference"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # /metrics reads the pool, the API's admission counts and the memory guard through these
        # functions: inference.metrics imports none of them (they publish into it).
        from inference import metrics

        metrics.connect(
            pool=_pool,
            in_flight=_in_flight,
            guard=_guard,
            serves_models=_serves_models,
            process_rss=_process_rss,
            workers=_workers,
        )


def _pool():
    from inference.pool import get_pool

    return get_pool()


def _in_flight():
    from inference.api.common import limits

    return limits.in_flight_by_model()


def _guard():
    from inference.pool.memory_guard import current

    return current()


def _serves_models() -> bool:
    """Whether this process runs inference (as omlx_site/server.py decides): else its pool never
    loads anything and its engine-side series would only mislead."""
    from inference.dispatch import get_backend

    return get_backend().runs_models


def _process_rss():
    from inference.pool.memory import process_rss

    return process_rss()


def _workers() -> dict:
    """Redis mode: the live workers and their summaries (network I/O); else none."""
    from inference.dispatch import get_backend

    backend = get_backend()
    return backend.workers() if hasattr(backend, "workers") else {}
