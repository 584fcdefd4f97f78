"""What the pool raises when it cannot do what it is asked."""


class InsufficientMemory(Exception):
    """A model cannot be loaded under the memory limits even after unloading every idle model."""


class ModelBusy(Exception):
    """A model cannot be unloaded now: it is pinned or has requests in flight."""


class ModelUnavailable(KeyError):
    """The id names a folder that cannot be served (``reason`` says why)."""

    def __init__(self, model_id: str, reason: str):
        super().__init__(model_id)
        self.reason = reason

    def __str__(self) -> str:
        return f"The model '{self.args[0]}' cannot be served: {self.reason}"


class ModelDown(Exception):
    """A loaded model whose engine can no longer run it (a machine of its distributed group was
    lost, inference.distributed.engine): it stays down until the server restarts."""


def check_up(model_id: str, engine) -> None:
    """ModelDown when ``engine`` reports itself lost (its ``lost`` says why)."""
    lost = getattr(engine, "lost", None)
    if lost:
        raise ModelDown(f"The model '{model_id}' is down: {lost}; restart omlx serve to serve it again")
