"""The distributed group of `omlx serve --distributed HOSTS.json`: starting the other ranks
(the hosts: ``hosts``), joining the group as rank 0.

Ranks on this machine (ssh "localhost" or a loopback IP) are started as local processes, the
others with ``ssh HOST`` (key-based login, omlx and Python at the same paths as here: as
mlx.launch assumes). Each runs ``python -m inference.distributed.follower`` with
``MLX_HOSTFILE`` and ``MLX_RANK`` set; its output goes to ``<log dir>/rank<r>.log`` here (a
remote rank's through its ssh session).

The group serves one model at a time (``claim``/``release``): the followers run the plans of
one engine.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import List, Optional

import mlx.core as mx

from .hosts import Host, read_hosts, read_parallel
from .watchdog import Watchdog

_ROOT = Path(__file__).resolve().parents[2]


class DistributedGroup:
    """The started group: ``group`` (rank 0's), ``processes`` (the local followers' and the ssh
    sessions of remote ones, rank order from 1), ``parallel`` (how a model is cut across the
    ranks: "pipeline" or "tensor", the hosts file's)."""

    def __init__(
        self,
        hosts: List[Host],
        model_dirs: List[Path],
        logs: Path,
        cache_dir=None,
        timeout=None,
        parallel="pipeline",
    ):
        self.parallel = parallel
        ring = json.dumps([[f"{h.ip}:{h.port}"] for h in hosts])
        logs.mkdir(parents=True, exist_ok=True)
        ring_file = logs / "ring-hosts.json"
        ring_file.write_text(ring)
        dirs = [arg for d in model_dirs for arg in ("--model-dir", str(d))]
        self.processes = []
        self.local: List[bool] = []  # whether each of them is a local process (else ssh)
        for rank, host in enumerate(hosts[1:], start=1):
            argv = [sys.executable, "-m", "inference.distributed.follower", *dirs]
            # The host's own folder, or rank 0's at the same path on its disk; each rank's blocks
            # go to the directory of its own fingerprint inside it.
            own = host.rank_cache_dir(str(cache_dir) if cache_dir else None)
            if own:
                argv += ["--cache-dir", own]
            log = open(logs / f"rank{rank}.log", "ab")
            if host.local:
                env = dict(os.environ, MLX_HOSTFILE=str(ring_file), MLX_RANK=str(rank), PYTHONPATH=str(_ROOT))
                proc = subprocess.Popen(argv, env=env, cwd=_ROOT, stdout=log, stderr=subprocess.STDOUT)
            else:
                script = (
                    f"cd {shlex.quote(str(_ROOT))} && f=$(mktemp) && echo {shlex.quote(ring)} > $f && "
                    f"MLX_HOSTFILE=$f MLX_RANK={rank} PYTHONPATH=. exec {shlex.join(argv)}"
                )
                proc = subprocess.Popen(["ssh", host.ssh, script], stdout=log, stderr=subprocess.STDOUT)
            log.close()  # the child has its own descriptor
            self.processes.append(proc)
            self.local.append(host.local)
        os.environ["MLX_HOSTFILE"], os.environ["MLX_RANK"] = str(ring_file), "0"
        self.group = mx.distributed.init(strict=True, backend="ring")
        # A rank that hangs (stopped, not dead) is found by a timeout on the steps' exchanges.
        self.watchdog = Watchdog(hosts, timeout) if timeout else None
        self._lock = threading.Lock()
        self._holder: Optional[object] = None
        self.broken: Optional[str] = None  # why no model can be served on it any more

    def ranks_state(self) -> str:
        """How the processes of the other ranks are (the log line of a close that failed): a
        local rank's pid and whether it runs or how it ended; a remote one's ssh session."""
        states = []
        for rank, proc in enumerate(self.processes, start=1):
            code = proc.poll()
            if code is None:
                state = "still running (it hangs, or is busy)"
            elif code < 0:
                state = f"killed by signal {-code} ({_signal_name(-code)})"
            else:
                state = f"exited with code {code}"
            where = "process" if self.local[rank - 1] else "ssh session"
            states.append(f"rank {rank} ({where} {proc.pid}): {state}")
        return "; ".join(states)

    def claim(self, holder) -> None:
        """Make ``holder`` (an engine) the group's one user; ValueError while another holds it
        or once the group is ``broken``."""
        with self._lock:
            if self.broken is not None:
                raise ValueError(f"the distributed group is broken ({self.broken}): restart omlx serve")
            if self._holder is not None:
                raise ValueError("the distributed group serves one model at a time: unload the other first")
            self._holder = holder

    def release(self, holder) -> None:
        with self._lock:
            if self._holder is holder:
                self._holder = None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


_started: Optional[DistributedGroup] = None
_start_lock = threading.Lock()


def shared_group(hosts_file, model_dirs, logs: Path, cache_dir=None, timeout=None) -> DistributedGroup:
    """The process's group, started at the first call (a process joins one group, once).
    ``cache_dir``: the SSD tier's folder (rank 0's ``paged_ssd_cache_dir``), the other ranks'
    too, on their own disks (inference.distributed.rank_cache). ``timeout``: seconds an exchange
    of a step may wait for the other ranks (inference.distributed.watchdog); None: no limit."""
    global _started
    with _start_lock:
        if _started is None:
            hosts, parallel = read_hosts(hosts_file), read_parallel(hosts_file)
            dirs = [Path(d) for d in model_dirs]
            _started = DistributedGroup(hosts, dirs, logs, cache_dir, timeout, parallel)
        return _started
