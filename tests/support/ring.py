"""Ranks of MLX's ring backend on loopback, started the way ``mlx.launch`` starts them: each
process gets ``MLX_HOSTFILE`` (a JSON list of one "ip:port" list per rank) and ``MLX_RANK``."""

import json
import os
import socket
import subprocess
import sys


def free_ports(n):
    """``n`` TCP ports free on 127.0.0.1 now (bound together, so they differ)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def ring_hostfile(path, ranks):
    """Write a ring hostfile for ``ranks`` processes on loopback; returns its path."""
    path.write_text(json.dumps([[f"127.0.0.1:{port}"] for port in free_ports(ranks)]))
    return path


def start_ranks(argv, hostfile, ranks, env=None):
    """Start ``python argv...`` once per rank; returns the Popen objects, rank order."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    procs = []
    for rank in range(ranks):
        rank_env = dict(
            os.environ, **(env or {}), MLX_HOSTFILE=str(hostfile), MLX_RANK=str(rank), PYTHONPATH=root
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def wait_ranks(procs, timeout=180):
    """Wait for every rank; returns [(exit code, output)] (a rank past ``timeout`` is killed)."""
    out = []
    for proc in procs:
        try:
            text, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        out.append((proc.returncode, text))
    return out
