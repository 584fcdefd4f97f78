"""http(s) image sources (inference/vision/remote.py): which addresses are refused, and a real
HTTP server on 127.0.0.1 behind names the test resolves itself, to show that every redirect hop
is resolved and checked again, that the connection goes to the checked address, and that
redirects, bytes and time are capped."""

import http.server
import threading
import time

import pytest

from inference.vision import remote
from inference.vision.limits import ImageLimits

PNG = b"\x89PNG-not-decoded-here"


@pytest.mark.parametrize(
    "address, why",
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("64:ff9b::7f00:1", "loopback"),  # NAT64
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "non-public"),  # carrier-grade NAT
        ("240.0.0.1", "address"),  # reserved (Python 3.11 says private)
    ],
)
def test_non_public_addresses_are_refused(address, why):
    assert why in remote.refusal(address)
    with pytest.raises(ValueError, match=f"resolves to .*{why}"):
        remote.check_addresses("example.test", ["93.184.215.14", address])  # one bad one is enough


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass(address):
    assert remote.refusal(address) is None


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        port = self.server.server_address[1]
        if self.path == "/img":
            return self._send(200, PNG)
        if self.path.startswith("/hop/"):  # /hop/N: N redirects before /img
            left = int(self.path.rsplit("/", 1)[1])
            return self._send(200, PNG) if left == 0 else self._redirect(f"/hop/{left - 1}")
        if self.path == "/to-metadata":
            return self._redirect(f"http://metadata.test:{port}/img")
        if self.path == "/to-file":
            return self._redirect("file:///etc/passwd")
        if self.path == "/to-ftp":
            return self._redirect(f"ftp://public.test:{port}/img")
        if self.path == "/slow-status":  # a status line a byte a while (each read is quick), cut off
            self.wfile.write(b"HTTP/1.1 ")
            try:
                for _ in range(60):
                    self.wfile.write(b"9")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
            self.close_connection = True
            return
        if self.path == "/stall":  # headers, then nothing
            self.send_response(200)
            self.end_headers()
            time.sleep(5)
            return
        if self.path == "/endless":  # no length, never ends
            self.send_response(200)
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                return
        if self.path == "/slow":  # a byte a while
            self.send_response(200)
            self.end_headers()
            try:
                for _ in range(200):
                    self.wfile.write(b"\0")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                return
        self._send(404, b"")

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location):
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class Resolver:
    """public.test and other.test -> 127.0.0.1, taken as public (the test's stand-ins for sites on
    the internet, names no real resolver knows: a fetch that reaches one connected to the checked
    address); other names -> their address here, checked as resolve_public checks. Records each
    lookup."""

    NAMES = {"metadata.test": ["169.254.169.254"], "private.test": ["10.0.0.7"]}

    def __init__(self):
        self.asked = []

    def __call__(self, host, port, limits, deadline):
        self.asked.append(host)
        if host in ("public.test", "other.test"):
            return ["127.0.0.1"]
        return remote.check_addresses(host, self.NAMES.get(host, ["127.0.0.1"]))


def _fetch(url, **limits):
    resolver = Resolver()
    limits = ImageLimits(allow_remote=True, **limits)
    return remote.fetch(url, limits, limits.deadline(), resolve=resolver), resolver.asked


def test_a_fetch_connects_to_the_checked_address(site):
    assert _fetch(f"http://public.test:{site}/img") == (PNG, ["public.test"])


def test_every_redirect_hop_is_resolved_and_checked(site):
    assert _fetch(f"http://public.test:{site}/hop/2") == (PNG, ["public.test"] * 3)
    with pytest.raises(ValueError, match="metadata.test resolves to 169.254.169.254, a cloud metadata"):
        _fetch(f"http://public.test:{site}/to-metadata")
    for path in ("/to-file", "/to-ftp"):
        with pytest.raises(ValueError, match="must be an http"):
            _fetch(f"http://public.test:{site}{path}")


def test_redirects_are_capped(site):
    _fetch(f"http://public.test:{site}/hop/{remote.MAX_REDIRECTS}")
    with pytest.raises(ValueError, match=f"redirects more than {remote.MAX_REDIRECTS} times"):
        _fetch(f"http://public.test:{site}/hop/{remote.MAX_REDIRECTS + 1}")


def test_names_are_checked_before_connecting(site):
    for host, why in (("private.test", "private"), ("127.0.0.1", "loopback")):
        with pytest.raises(ValueError, match=why):
            _fetch(f"http://{host}:{site}/img")
    with pytest.raises(ValueError, match="localhost resolves to .*loopback"):  # the real resolver
        limits = ImageLimits(allow_remote=True)
        remote.fetch(f"http://localhost:{site}/img", limits, limits.deadline())


def test_downloads_stop_at_the_byte_cap_and_the_deadline(site):
    with pytest.raises(ValueError, match="larger than 1048576 bytes"):
        _fetch(f"http://public.test:{site}/endless", max_bytes=1 << 20)
    for path in ("/slow", "/slow-status", "/stall"):
        with pytest.raises(ValueError, match="not read within 0.5 s"):
            _fetch(f"http://public.test:{site}{path}", timeout=0.5)


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory):
    """An HTTPS server on 127.0.0.1 whose self-signed certificate names public.test only."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=public.test"]
        + ["-addext", "subjectAltName=DNS:public.test", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], cert
    server.shutdown()
    server.server_close()


def test_https_to_the_checked_address_verifies_the_name(tls_site, monkeypatch):
    """The connection goes to the checked address; the certificate is still checked against the
    URL's name (SNI and hostname), not the address."""
    port, cert = tls_site
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the default context trusts the test's certificate
    assert _fetch(f"https://public.test:{port}/img") == (PNG, ["public.test"])
    with pytest.raises(ValueError, match="cannot be fetched: .*certificate"):  # same address, other name
        _fetch(f"https://other.test:{port}/img")
