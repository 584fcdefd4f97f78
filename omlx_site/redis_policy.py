"""Who may be trusted with the Redis of Redis mode (docs/security.md): a Redis URL is accepted only
with the shared secret that signs every message (OMLX_REDIS_SECRET), and only with a password
unless the Redis is on this machine (a loopback address, a unix socket) or the user said that the
network is trusted (--redis-trusted-network). ``rediss://`` (TLS) is passed to redis-py as given."""

from __future__ import annotations

import ipaddress
from typing import Any, Mapping

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
SECRET_HINT = (
    "give every `omlx serve` and `omlx worker` of this Redis the same secret: --redis-secret or "
    "OMLX_REDIS_SECRET (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
)


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check(values: Mapping[str, Any]) -> None:
    """ValueError when the Redis settings (by key) would let others run or forge jobs."""
    url = values.get("redis_url")
    if not url:
        return
    if not values.get("redis_secret"):
        raise ValueError(f"--redis-url needs a shared secret that signs the jobs: {SECRET_HINT}")
    if url.startswith("unix://"):
        return  # a socket file: its permissions say who may connect
    from redis.connection import parse_url

    try:
        parts = parse_url(url)
    except ValueError as exc:
        raise ValueError(f"--redis-url: {exc}") from None
    if parts.get("password") or values.get("redis_trusted_network"):
        return
    host = parts.get("host") or "localhost"
    if not is_loopback(host):
        raise ValueError(
            f"--redis-url: the Redis at {host} has no password in the URL, so anyone on the network "
            "could read and fill its queue: give one (redis://:PASSWORD@host:6379/0, rediss:// for "
            "TLS), or --redis-trusted-network if only trusted machines can reach it"
        )
