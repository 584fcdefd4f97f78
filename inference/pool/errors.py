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
