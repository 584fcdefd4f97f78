"""The hosts file of `omlx serve --distributed HOSTS.json`.

It is ``mlx.launch``'s: a JSON list, one object per machine, rank order, the first being this
one: ``{"ssh": "hostname", "ips": ["10.0.0.2"]}``; omlx also reads an optional ``"port"`` (the
ring backend's port on that machine; default 32323 + rank). Only the first IP of each host is
used (one ring connection per pair of neighbours).

A host after the first may name its own ``"paged_ssd_cache_dir"``: the folder of its rank's SSD
tier on that machine's disk (absolute, or from ``~`` of the user ssh logs in as), or ``"off"``
(that rank keeps its blocks in RAM only). Without it a rank uses rank 0's folder, at the same
path on its own disk. Rank 0's own folder is ``omlx serve``'s ``--paged-ssd-cache-dir``; with
that ``off``, every rank keeps its blocks in RAM only.

The file may also be an object, ``{"parallel": "tensor", "hosts": [...]}``, the list being
``mlx.launch``'s: ``parallel`` chooses how a model is cut across the ranks, "pipeline" (the
default, and what the plain list means: inference.distributed.pipeline) or "tensor"
(inference.distributed.tensor).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

MAX_RANKS = 16
DEFAULT_PORT = 32323
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,252}$")
_LOCAL = {"localhost", "127.0.0.1", "::1"}
_KEYS = {"ssh", "ips", "port", "paged_ssd_cache_dir"}
MAX_PATH = 1024


@dataclass(frozen=True)
class Host:
    ssh: str
    ip: str
    port: int
    cache_dir: Optional[str] = None  # its own paged_ssd_cache_dir ("off": RAM only); None: rank 0's

    def rank_cache_dir(self, default: Optional[str]) -> Optional[str]:
        """This host's rank's SSD folder, given rank 0's ``default``; None: RAM only (as on
        every rank when rank 0's tier is off: ``default`` None)."""
        if self.cache_dir is None or default is None:
            return default
        return None if self.cache_dir == "off" else self.cache_dir

    @property
    def local(self) -> bool:
        return self.ssh in _LOCAL or ipaddress.ip_address(self.ip).is_loopback


def read_hosts(path) -> List[Host]:
    """The hosts of ``path``; ValueError saying what is wrong with the file."""
    data = _read(path)
    if isinstance(data, dict):
        data = data.get("hosts")
    if not isinstance(data, list) or not 2 <= len(data) <= MAX_RANKS:
        raise ValueError(f"{path}: a list of 2 to {MAX_RANKS} hosts, rank 0 (this machine) first")
    hosts = []
    for rank, entry in enumerate(data):
        where = f"{path}: host {rank}"
        if not isinstance(entry, dict) or not set(entry) <= _KEYS:
            raise ValueError(
                f'{where}: an object with "ssh", "ips" and optionally "port" and "paged_ssd_cache_dir"'
            )
        ssh, ips, port = entry.get("ssh"), entry.get("ips"), entry.get("port", DEFAULT_PORT + rank)
        if not isinstance(ssh, str) or not _HOSTNAME.match(ssh):
            raise ValueError(f'{where}: "ssh" must be a host name')
        if not isinstance(ips, list) or not ips or not all(isinstance(ip, str) for ip in ips):
            raise ValueError(f'{where}: "ips" must list its IP addresses (the ring backend needs them)')
        try:
            ip = str(ipaddress.ip_address(ips[0]))
        except ValueError:
            raise ValueError(f"{where}: {ips[0]!r} is not an IP address") from None
        if not isinstance(port, int) or isinstance(port, bool) or not 1024 <= port <= 65535:
            raise ValueError(f'{where}: "port" must be a TCP port from 1024 to 65535')
        hosts.append(Host(ssh, ip, port, _cache_dir(entry, rank, where)))
    return hosts


def _cache_dir(entry: dict, rank: int, where: str) -> Optional[str]:
    if "paged_ssd_cache_dir" not in entry:
        return None
    if rank == 0:
        raise ValueError(
            f"{where}: rank 0's SSD folder is omlx serve's --paged-ssd-cache-dir, not the hosts file's"
        )
    folder = entry["paged_ssd_cache_dir"]
    ok = isinstance(folder, str) and 0 < len(folder) <= MAX_PATH and "\0" not in folder
    if not ok or not (folder == "off" or folder.startswith(("/", "~"))):
        raise ValueError(f'{where}: "paged_ssd_cache_dir" must be an absolute folder (or ~/...) or "off"')
    return folder


PARALLEL_MODES = ("pipeline", "tensor")


def read_parallel(path) -> str:
    """How the hosts file ``path`` cuts a model across its ranks: "pipeline" or "tensor";
    ValueError saying what is wrong with the file."""
    data = _read(path)
    if not isinstance(data, dict):
        return "pipeline"
    if not set(data) <= {"parallel", "hosts"}:
        raise ValueError(f'{path}: an object with "hosts" (mlx.launch\'s list) and optionally "parallel"')
    parallel = data.get("parallel", "pipeline")
    if parallel not in PARALLEL_MODES:
        raise ValueError(f'{path}: "parallel" must be one of {", ".join(PARALLEL_MODES)}, not {parallel!r}')
    read_hosts(path)
    return parallel


def _read(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON hosts file: {exc}") from None
