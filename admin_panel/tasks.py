"""Huey tasks of the admin panel: the benchmark of the Benchmark page.

``start_benchmark`` (the page's POST) creates a ``BenchmarkRun`` and queues
``run_benchmark_task``; a Huey worker (inside `omlx serve`, or an `omlx worker` with Redis) runs
``inference.bench.run_benchmark`` (or ``run_accuracy``, when the run's settings say
``"scenario": "accuracy"``) against a model of its own model pool, writes the progress and
the results so far to the row after every step, and publishes each step on the channel layer
group ``omlx.bench.<run id>`` (``group_name``), which the page's websocket consumer
(admin_panel/consumers/benchmark.py) listens to. Events, plain dicts:

    {"kind": "progress", "run": id, "status", "done", "total", "message", "results"}
    {"kind": "finished", "run": id, "status": "done" | "failed", "error", "results"}

One benchmark at a time: it holds one Huey worker thread for its whole run, while API requests
need a thread only to start (inference/tasks.py), so a second benchmark is refused, and so is a
first one in a server with a single worker thread (it would stall the API).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from huey.contrib.djhuey import db_task

logger = logging.getLogger("omlx.bench")


class BenchmarkRefused(ValueError):
    """A benchmark cannot start now; the message says why (shown on the page)."""


def group_name(run_id: int) -> str:
    return f"omlx.bench.{run_id}"


def _publish(run_id: int, event: dict) -> None:
    from inference.dispatch import relay

    relay.publish_group(group_name(run_id), dict(event, run=run_id))


def check_workers() -> None:
    """BenchmarkRefused when no Huey worker could run a benchmark next to the API's requests."""
    if settings.OMLX_REDIS_URL:
        from inference.dispatch.worker_presence import any_worker_alive

        alive = any_worker_alive()
        if alive is None:
            raise BenchmarkRefused("The queue (Redis) cannot be reached")
        if not alive:
            raise BenchmarkRefused("No worker is running: start one with `omlx worker`")
        return
    from inference.dispatch.huey_consumer import running

    if not running():
        raise BenchmarkRefused(
            "No Huey worker runs in this server (OMLX_API_HANDOFF=direct or --workers 0): "
            "use `omlx bench` from a terminal instead"
        )
    if settings.OMLX_API_HANDOFF == "huey" and settings.OMLX_HUEY_WORKERS < 2:
        raise BenchmarkRefused(
            "A benchmark holds a Huey worker thread for its whole run and this server has "
            "only one (--workers 1): it would stall the API. Start the server with "
            "--workers 2 or more, or use `omlx bench`"
        )


def start_benchmark(model: str, bench_settings, preset: str = "custom"):
    """Create a queued BenchmarkRun of ``model`` and queue its task; BenchmarkRefused when the
    model is unknown, asked to draft without a draft model (a draft model that cannot load fails
    the run at its warm-up, with the engine's reason), no worker can run it, or another benchmark
    is queued or running."""
    from inference.pool import get_pool

    from .models import BenchmarkRun

    model_id = get_pool().resolve(model)
    if model_id is None:
        raise BenchmarkRefused(get_pool().not_found_message(model))
    if getattr(bench_settings, "speculative", None) == "draft" and get_pool().draft_of(model_id) is None:
        raise BenchmarkRefused(
            f"Speculative decoding 'draft': the model '{model_id}' has no draft model (set its "
            "draft model on the Models page, or start the server with --draft-model)"
        )
    check_workers()
    fail_lost_runs()
    with transaction.atomic():
        active = BenchmarkRun.objects.filter(status__in=BenchmarkRun.ACTIVE).first()
        if active is not None:
            raise BenchmarkRefused(
                f"Benchmark #{active.pk} ({active.model}) is {active.status}: one benchmark runs at a time"
            )
        run = BenchmarkRun.objects.create(
            model=model_id,
            target="local",
            settings=dict(bench_settings.to_dict(), preset=preset),
            progress_total=bench_settings.total_steps(),
            progress_message="queued",
        )
    try:
        run_benchmark_task(run.pk)
    except Exception as exc:  # the queue (Redis) cannot be reached: the run must not block others
        logger.exception("queueing benchmark #%d failed", run.pk)
        BenchmarkRun.objects.filter(pk=run.pk).update(
            status=BenchmarkRun.FAILED, finished=timezone.now(), error=f"it could not be queued: {exc}"
        )
        raise BenchmarkRefused(f"The benchmark could not be queued: {exc}") from None
    if not settings.OMLX_REDIS_URL:
        from inference.dispatch import huey_consumer

        huey_consumer.notify()
    return run


@db_task(retries=0)
def run_benchmark_task(run_id: int) -> None:
    execute(run_id)


def execute(run_id: int) -> None:
    """Run the benchmark of a queued BenchmarkRun (the task's body); every outcome is written to
    the row and published, nothing is raised."""
    from inference.engine import ModelLoadError
    from inference.pool import InsufficientMemory, ModelUnavailable

    from inference.bench import (
        AccuracySettings,
        BenchSettings,
        PoolTarget,
        TargetError,
        run_accuracy,
        run_benchmark,
    )
    from .models import BenchmarkRun

    from inference.dispatch.worker_presence import worker_id

    updated = BenchmarkRun.objects.filter(pk=run_id, status=BenchmarkRun.QUEUED).update(
        status=BenchmarkRun.RUNNING, started=timezone.now(), progress_message="starting", worker=worker_id()
    )
    if not updated:  # deleted, or already taken
        return
    run = BenchmarkRun.objects.get(pk=run_id)
    results, error = None, ""

    def progress(done: int, total: int, message: str, partial: dict) -> None:
        BenchmarkRun.objects.filter(pk=run_id).update(
            progress_done=done, progress_total=total, progress_message=message[:200], results=partial
        )
        _publish(
            run_id,
            {
                "kind": "progress",
                "status": BenchmarkRun.RUNNING,
                "done": done,
                "total": total,
                "message": message,
                "results": partial,
            },
        )

    try:
        values = {k: v for k, v in run.settings.items() if k != "preset"}
        if values.get("scenario") == "accuracy":
            bench_settings, scenario = AccuracySettings.from_dict(values), run_accuracy
        else:
            bench_settings, scenario = BenchSettings.from_dict(values), run_benchmark
        logger.info("benchmark #%d of %s started", run_id, run.model)
        with PoolTarget(run.model) as target:
            results = scenario(target, bench_settings, progress)
    except ModelUnavailable as exc:
        error = str(exc)
    except KeyError:
        error = f"The model '{run.model}' does not exist"
    except (InsufficientMemory, ModelLoadError, TargetError, ValueError) as exc:
        error = str(exc)
    except Exception as exc:
        logger.exception("benchmark #%d failed", run_id)
        error = f"{type(exc).__name__}: {exc}"
    finally:
        status = BenchmarkRun.DONE if not error and results is not None else BenchmarkRun.FAILED
        if status == BenchmarkRun.FAILED and not error:
            error = "the benchmark stopped"
        changes = {
            "status": status,
            "finished": timezone.now(),
            "error": error,
            "progress_message": "done" if status == BenchmarkRun.DONE else "failed",
        }
        if results is not None:
            changes["results"] = results
            changes["progress_done"] = changes["progress_total"] = bench_settings.total_steps()
        BenchmarkRun.objects.filter(pk=run_id).update(**changes)
        logger.info("benchmark #%d of %s %s%s", run_id, run.model, status, f": {error}" if error else "")
        final = BenchmarkRun.objects.filter(pk=run_id).first()
        _publish(
            run_id,
            {
                "kind": "finished",
                "status": status,
                "error": error,
                "results": final.results if final is not None else results,
            },
        )


def _interrupt(queryset, why: str) -> int:
    from .models import BenchmarkRun

    return queryset.update(
        status=BenchmarkRun.FAILED,
        error=f"interrupted: {why}",
        finished=timezone.now(),
        progress_message="interrupted",
    )


def fail_interrupted_runs() -> int:
    """At `omlx serve`'s start: mark the runs the previous server left unfinished failed; how many.
    Embedded: every queued or running run (its worker was that server; a queued task that still
    runs later finds its run no longer queued and skips it). Redis: only runs whose worker process
    has stopped (``fail_lost_runs``); the others go on in their workers."""
    from .models import BenchmarkRun

    if settings.OMLX_REDIS_URL:
        return fail_lost_runs()
    return _interrupt(
        BenchmarkRun.objects.filter(status__in=BenchmarkRun.ACTIVE), "the server stopped before the run ended"
    )


def fail_lost_runs() -> int:
    """Redis mode: mark failed the running runs whose worker process no longer beats
    (``inference.dispatch.worker_presence``); how many. The page calls it whenever it looks at runs."""
    if not settings.OMLX_REDIS_URL:
        return 0
    from inference.dispatch.worker_presence import is_alive

    from .models import BenchmarkRun

    lost = 0
    for run in BenchmarkRun.objects.filter(status=BenchmarkRun.RUNNING).exclude(worker=""):
        if is_alive(run.worker) is False:
            lost += _interrupt(
                BenchmarkRun.objects.filter(pk=run.pk, status=BenchmarkRun.RUNNING),
                f"the worker running it ({run.worker}) stopped",
            )
    return lost
