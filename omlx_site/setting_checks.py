"""The checks of omlx's settings (omlx_site/config.py's table): each takes a value its kind has
parsed and raises ValueError, saying why, when the setting cannot have it. Checks that need a
component (the engine's config, the memory limits, the MCP configuration) import it when they run,
so reading the table stays cheap."""

from __future__ import annotations


def at_least(low):
    def check(value):
        if value < low:
            raise ValueError(f"{value}: must be >= {low}")

    return check


def positive(value):
    if value <= 0:
        raise ValueError(f"{value}: must be > 0")


def port(value):
    if not 0 <= value <= 65535:
        raise ValueError(f"{value}: must be in [0, 65535]")


def engine(field):
    def check(value):
        from inference.engine.config import EngineConfig  # imports MLX (inference.engine)

        EngineConfig(**{field: value})

    return check


def memory_limit(auto):
    def check(value):
        from inference.pool.memory import auto_process_limit, parse_limit  # the pool: when checked

        parse_limit(value, "limit", auto=auto_process_limit() if auto else None)

    return check


def fraction(value):
    if not 0 < value < 1:
        raise ValueError(f"{value}: must be between 0 and 1 (a share of the memory limit)")


def request_size(value):
    if value < 1024:
        raise ValueError(f"{value} bytes: must be at least 1KiB")


def redis_url(value):
    if not value.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"{value}: must start with redis://, rediss:// or unix://")


def redis_secret(value):
    if len(value) < 16:
        raise ValueError("must be at least 16 characters (a random string; docs/security.md)")


def mcp_config(path):
    from inference.mcp import config as mcp_config  # the inference package: when checked

    mcp_config.load(path)


def distributed_hosts(path):
    from inference.distributed import hosts  # the inference package: when checked

    hosts.read_parallel(path)  # and the hosts


def one_of(*choices):
    def check(value):
        if value not in choices:
            raise ValueError(f"{value!r}: must be one of {', '.join(choices)}")

    return check


def host_names(value):
    from omlx_site.boundary import parse_hosts  # Django's host matching: when checked

    parse_hosts(value)


def origins(value):
    from omlx_site.boundary import parse_origins  # as above

    parse_origins(value)
