"""The old import path of the model pool (``inference.pool``): ``get_registry()`` is the
process's ``ModelPool``."""
from inference.pool import ModelPool as ModelRegistry  # noqa: F401
from inference.pool import close_pool as close_registry  # noqa: F401
from inference.pool import get_pool as get_registry  # noqa: F401
from inference.pool.discovery import discover  # noqa: F401
