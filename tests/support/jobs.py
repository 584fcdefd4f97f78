"""A generation job run as a worker runs it (inference.generation.run_job), for the tests of the
model pool behind it."""

import threading

from inference.generation import GenerationJob, run_job


def job_events(model, prompt, **params):
    """A completion job of ``prompt`` on ``model`` (the process's pool): its events, the last an
    error or the one with a finish reason."""
    events, done = [], threading.Event()

    def publish(group, event):
        events.append(event)
        if event["kind"] == "error" or event.get("finish_reason"):
            done.set()

    run_job(GenerationJob("job", model, params, prompts=[prompt]), publish)
    assert done.wait(120)
    return events
