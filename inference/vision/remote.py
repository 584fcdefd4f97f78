"""http(s) images, fetched only with the ``allow_remote_images`` setting, and never from the
server's own side of the network.

Each hop resolves its name here, refuses it when any address is not public (loopback, private,
link-local, cloud metadata, multicast, reserved: ``refusal``), and connects to an address it
checked (a name that resolves to a public address for the check and to 127.0.0.1 for the
connection, DNS rebinding, changes nothing); TLS still verifies the certificate against the name.
Redirects are followed by hand, at most ``MAX_REDIRECTS``, each to http(s) only and each checked
again. The whole fetch, the name lookups included, ends at the image's deadline (a timer cuts
the socket) and never holds more than the byte cap. No proxy is used.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import threading
import urllib.parse
from typing import Callable, List, Optional

from .limits import ImageLimits, read_capped, remaining

MAX_REDIRECTS = 3
REDIRECTS = (301, 302, 303, 307, 308)
# Cloud instance metadata services (AWS, GCP and Azure share the first; AWS's IPv6 one; Alibaba's).
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")}
NAT64 = ipaddress.ip_network("64:ff9b::/96")

Resolve = Callable[[str, int, ImageLimits, float], List[str]]


def refusal(address: str) -> Optional[str]:
    """Why ``address`` is no place to fetch an image from (None: a public address)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # without an IPv6 zone (fe80::1%eth0)
    if ip.version == 6 and ip.ipv4_mapped is not None:  # ::ffff:127.0.0.1 is 127.0.0.1
        ip = ip.ipv4_mapped
    elif ip.version == 6 and ip in NAT64:  # 64:ff9b::7f00:1 reaches 127.0.0.1 through a NAT64
        ip = ipaddress.ip_address(int(ip) & 0xFFFFFFFF)
    if ip in METADATA:
        return "a cloud metadata address"
    for name, test in (
        ("loopback", ip.is_loopback),
        ("unspecified", ip.is_unspecified),  # 0.0.0.0 reaches this machine
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
    ):
        if test:
            return f"a {name} address"
    if not ip.is_global:  # shared (100.64/10), documentation and benchmark ranges
        return "a non-public address"
    return None


def resolve_public(host: str, port: int, limits: ImageLimits, deadline: float) -> List[str]:
    """Every address of ``host``, all public (ValueError naming the first that is not)."""
    found: dict = {}

    def lookup():
        try:
            found["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            found["error"] = exc

    thread = threading.Thread(target=lookup, name="image-dns", daemon=True)
    thread.start()
    thread.join(remaining(deadline, limits))
    if thread.is_alive():  # the resolver's own timeout ends the thread later
        raise limits.too_slow()
    if "error" in found:
        raise ValueError(f"the image URL's host {host} cannot be resolved: {found['error']}")
    return check_addresses(host, list(dict.fromkeys(info[4][0] for info in found["infos"])))


def check_addresses(host: str, addresses: List[str]) -> List[str]:
    """``addresses`` (of ``host``) when every one is public, else ValueError naming the first
    that is not: one private address among public ones may be the one a client connects to."""
    for address in addresses:
        why = refusal(address)
        if why is not None:
            raise ValueError(
                f"the image URL's host {host} resolves to {address}, {why}: this server fetches "
                "images only from public addresses"
            )
    return addresses


def fetch(url: str, limits: ImageLimits, deadline: float, resolve: Resolve = resolve_public) -> bytes:
    """The body of ``url`` (an http(s) URL), following at most MAX_REDIRECTS redirects."""
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an image URL (or a redirect's Location) must be an http(s) URL with a host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError("the image URL's port is not a number in [0, 65535]") from None
        addresses = resolve(parts.hostname, port, limits, deadline)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        status, location, body = _get(parts.scheme, parts.hostname, port, addresses, target, limits, deadline)
        if status in REDIRECTS and location:
            url = urllib.parse.urljoin(url, location)
            continue
        if status != 200:
            raise ValueError(f"the image URL answered HTTP {status}")
        return body
    raise ValueError(f"the image URL redirects more than {MAX_REDIRECTS} times")


def _get(scheme, host, port, addresses, target, limits, deadline):
    """(status, Location, body) of one GET sent to the first of ``addresses`` that connects."""
    cls = _PinnedHTTPS if scheme == "https" else _PinnedHTTP
    error = None
    for address in addresses:
        conn = cls(host, port, address, timeout=remaining(deadline, limits))
        try:
            conn.connect()
        except OSError as exc:
            error = exc
            conn.close()
            continue
        return _exchange(conn, target, limits, deadline)
    if isinstance(error, TimeoutError):  # the connect timeout is the time left
        raise limits.too_slow()
    raise ValueError(f"the image URL cannot be fetched: {error}")


def _exchange(conn, target, limits, deadline):
    cut, sock = threading.Event(), conn.sock  # http.client drops conn.sock once a response will close

    def cut_socket():  # the deadline: a blocked read of the request's thread returns at once
        cut.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    timer = threading.Timer(remaining(deadline, limits), cut_socket)
    timer.daemon = True
    timer.start()
    try:
        conn.request(
            "GET", target, headers={"Accept": "image/*", "User-Agent": "omlx", "Connection": "close"}
        )
        response = conn.getresponse()
        if response.status in REDIRECTS:
            return response.status, response.getheader("Location"), b""
        if response.status != 200:
            return response.status, None, b""
        length = response.getheader("Content-Length")
        if length and length.isdigit() and int(length) > limits.max_bytes:
            raise limits.too_large()
        body = read_capped(response.read1, limits, deadline)
        if cut.is_set():
            raise limits.too_slow()
        return 200, None, body
    except (OSError, http.client.HTTPException) as exc:
        if cut.is_set() or isinstance(exc, TimeoutError):  # the deadline, or a read that waited it out
            raise limits.too_slow() from None
        raise ValueError(f"the image URL cannot be fetched: {exc}") from None
    finally:
        timer.cancel()
        conn.close()


class _PinnedHTTP(http.client.HTTPConnection):
    """An HTTP connection to ``address``, a checked address of ``host`` (the Host header's name)."""

    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self):
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to a checked ``address``; the certificate is verified against ``host``."""

    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self):
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
