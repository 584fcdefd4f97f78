"""Redis mode's trust rules (omlx_site/redis_policy.py) at start, and the signed queue and channel
layer over a real TLS redis-server (``rediss://``)."""

import asyncio
import os
import shutil
import subprocess
import sys

import pytest

from tests.support.redis_server import REDIS, SECRET, Process, free_port

pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")


def omlx(*argv, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OMLX_REDIS")}
    return subprocess.run(
        [sys.executable, "-m", "omlx_site.cli", *argv],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_an_unsafe_redis_is_refused_at_start(command, tmp_path):
    home = {"OMLX_HOME": str(tmp_path)}
    no_secret = omlx(command, "--redis-url", "redis://127.0.0.1:6379/0", **home)
    assert no_secret.returncode == 2 and "--redis-secret or OMLX_REDIS_SECRET" in no_secret.stderr
    open_network = omlx(command, "--redis-url", "redis://10.1.2.3:6379/0", OMLX_REDIS_SECRET=SECRET, **home)
    assert open_network.returncode == 2
    assert "has no password" in open_network.stderr and "--redis-trusted-network" in open_network.stderr
    short = omlx(command, "--redis-url", "redis://127.0.0.1:6379/0", "--redis-secret", "short", **home)
    assert short.returncode == 2 and "at least 16 characters" in short.stderr


def test_the_policy_accepts_what_it_should():
    from omlx_site.redis_policy import check

    for url, trusted in [
        ("redis://127.0.0.1:6379/0", False),
        ("redis://localhost/0", False),
        ("redis://[::1]:6379", False),
        ("unix:///run/redis.sock", False),
        ("redis://:pw@10.1.2.3:6379/0", False),
        ("rediss://user:pw@redis.example:6380/0", False),
        ("rediss://redis.example:6380/0", True),
    ]:
        check({"redis_url": url, "redis_secret": SECRET, "redis_trusted_network": trusted})
    with pytest.raises(ValueError, match="has no password"):
        check({"redis_url": "rediss://redis.example:6380/0", "redis_secret": SECRET})


@pytest.fixture(scope="module")
def tls_url(tmp_path_factory):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed (it makes the test's certificate)")
    work = tmp_path_factory.mktemp("redis-tls")
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    server = Process(
        [REDIS, "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert)]
        + ["--tls-key-file", str(key), "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"]
        + ["--save", "", "--appendonly", "no", "--dir", str(work)],
        dict(os.environ),
        "Ready to accept connections",
    )
    yield f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={cert}"
    server.stop()


def test_signed_jobs_over_tls(tls_url):
    """The URL reaches redis-py as given: jobs cross a TLS connection, signed; a forged one is
    dropped."""
    import redis

    from inference.dispatch.signed_huey import SignedRedisHuey

    huey = SignedRedisHuey("omlx-tls", redis_secret=SECRET, url=tls_url)
    assert huey.storage.conn.connection_pool.connection_class.__name__ == "SSLConnection"

    @huey.task()
    def add(a, b):
        return a + b

    result = add(1, 2)
    raw = huey.storage.conn.lrange(huey.storage.queue_key, 0, -1)
    assert raw and raw[0].startswith(b"omlx1:huey:")
    huey.execute(huey.dequeue())
    assert result.get() == 3
    redis.Redis.from_url(tls_url).lpush(huey.storage.queue_key, b"\x80\x04forged")
    assert huey.dequeue() is None and huey.pending_count() == 0


def test_signed_events_over_tls(tls_url):
    from inference.dispatch.signed_layer import SignedRedisChannelLayer

    async def roundtrip():
        layer = SignedRedisChannelLayer(hosts=[tls_url], prefix="omlx", redis_secret=SECRET)
        forger = SignedRedisChannelLayer(hosts=[tls_url], prefix="omlx", redis_secret="x" * 32)
        channel = await layer.new_channel()
        await forger.send(channel, {"type": "generation.event", "event": {"kind": "forged"}})
        await layer.send(channel, {"type": "generation.event", "event": {"kind": "delta"}})
        message = await asyncio.wait_for(layer.receive(channel), 30)
        await layer.flush()
        await forger.flush()
        return message

    assert asyncio.run(roundtrip())["event"] == {"kind": "delta"}
