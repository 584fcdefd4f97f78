"""Rank 0's watch over the group: a rank that stops answering without closing its connection
(a stopped process, a machine that hangs) is found by a timeout on the exchanges of a step.

Every collective rank 0 runs while it serves (a step plan, an agreement, a hidden state handed
on through the pipeline) is timed (``plan_channel.collective``). The exchanges of one step wait
only for the other ranks' share of that step, so one that waits longer than
``OMLX_DISTRIBUTED_TIMEOUT`` seconds means a rank is not answering. The watchdog then shuts down
rank 0's ring connections (its TCP sockets to the other ranks' ring ports): the collective fails
as when a rank dies (``GroupLost``), the requests in flight end with the error that says so, and
the model is down until the server restarts. Loading a model is not timed (``watched=False``):
it may take long on a large model. Closing one is (``DistributedEngine._close_ranks``): a rank
has the timeout to write its RAM blocks down and confirm, and one that died or hangs does not
hold up the server's exit.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import List

from . import plan_channel
from .hosts import Host

logger = logging.getLogger("omlx.distributed")


class Watchdog:
    """A daemon thread that checks, a few times per ``timeout``, how long the collective rank 0
    waits for has been waiting."""

    def __init__(self, hosts: List[Host], timeout: float):
        self.hosts = hosts
        self.timeout = timeout
        self.fired = False
        threading.Thread(target=self._run, name="omlx-distributed-watchdog", daemon=True).start()

    def _run(self) -> None:
        while not self.fired:
            time.sleep(min(1.0, self.timeout / 4))
            since = plan_channel.waiting_since()
            if since is not None and time.monotonic() - since > self.timeout:
                self.fire()

    def fire(self) -> None:
        self.fired = True
        reason = f"no answer within {self.timeout:g} s (OMLX_DISTRIBUTED_TIMEOUT): a rank hangs"
        plan_channel.mark_hung(reason)
        closed = shut_ring_connections(self.hosts)
        logger.error("distributed group: %s; closed %d ring connections", reason, closed)


def shut_ring_connections(hosts: List[Host]) -> int:
    """Shut down this process's TCP connections of the ring (to another host's ring port, or
    accepted on rank 0's own); returns how many. Other sockets (the HTTP server's) are left."""
    own = hosts[0].port
    peers = {(h.ip, h.port) for h in hosts[1:]}
    ips = {h.ip for h in hosts[1:]}
    closed = 0
    for name in os.listdir("/dev/fd"):  # Linux and macOS
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue  # not a socket (or already closed)
        try:
            if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            peer, mine = sock.getpeername()[:2], sock.getsockname()[:2]
            if tuple(peer) in peers or (mine[1] == own and peer[0] in ips):
                sock.shutdown(socket.SHUT_RDWR)
                closed += 1
        except OSError:
            pass  # a listening socket has no peer
        finally:
            sock.close()  # the duplicate only: shutdown acted on the connection itself
    return closed
