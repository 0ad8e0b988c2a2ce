"""The edge (issue 57.5): deploy/nginx-explorer.conf, as scripts/serve_public.py renders it, in front of a page.
1,000 slow-header connections from one address do not starve another address's GET: nginx holds them (cheaply,
its own descriptors) and hands the page whole requests only. Runs Debian's nginx binary when it is installed."""

from __future__ import annotations

import importlib.util
import resource
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow(reason="runs nginx and the app, and 1,000 slow-header connections")
ROOT = Path(__file__).resolve().parent.parent
SLOW, VISITOR = "127.0.0.2", "127.0.0.3"
CONNECTIONS = 1000


def _serve_public():
    spec = importlib.util.spec_from_file_location("serve_public", ROOT / "scripts" / "serve_public.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Upstream(BaseHTTPRequestHandler):
    connections = 0

    def setup(self):
        type(self).connections += 1
        super().setup()

    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"page"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def proxied(tmp_path):
    serve_public = _serve_public()
    if serve_public.nginx_binary() is None:
        pytest.skip("nginx is not installed (Debian: apt-get install nginx-light); the config is not exercised")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < CONNECTIONS + 200:
        if hard < CONNECTIONS + 200:
            pytest.skip(f"this process may open {hard} files; the test opens {CONNECTIONS} connections")
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    app_port, port = _free_port(), _free_port()
    upstream = ThreadingHTTPServer(("127.0.0.1", app_port), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    conf = serve_public.render(tmp_path / "nginx", port, app_port, listen="127.0.0.1")
    proxy = serve_public.start_nginx(conf)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and proxy.poll() is None, (tmp_path / "nginx" / "error.log").read_text()
            time.sleep(0.2)
        yield port
    finally:
        proxy.terminate()
        proxy.wait(timeout=20)
        upstream.shutdown()


def test_slow_header_connections_from_one_address_do_not_starve_another(proxied):
    port, opened = proxied, []
    seen_before = _Upstream.connections
    try:
        for _ in range(CONNECTIONS):
            sock = socket.socket()
            sock.bind((SLOW, 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"GET / HTTP/1.1\r\nHost: example\r\n")  # a head that never ends
            opened.append(sock)
        started = time.monotonic()
        with httpx.Client(transport=httpx.HTTPTransport(local_address=VISITOR), timeout=10) as visitor:
            reply = visitor.get(f"http://127.0.0.1:{port}/")
        took = time.monotonic() - started
        assert reply.status_code == 200 and reply.text == "page"
        assert took < 2.0, f"the visitor's GET took {took:.2f} s behind {CONNECTIONS} slow heads"
        assert _Upstream.connections - seen_before <= 2  # the page saw the visitor, not the 1,000
    finally:
        for sock in opened:
            sock.close()


def test_the_rendered_configuration_holds_the_limits(tmp_path):
    text = _serve_public().render(tmp_path, 8443, 7999, cert="/c.pem", key="/k.pem").read_text()
    for line in ("client_header_timeout 10s", "client_body_timeout 10s", "limit_conn explorer_conn 32",
                 "limit_req zone=explorer_req", "listen 0.0.0.0:8443 ssl", "ssl_certificate /c.pem",
                 "server 127.0.0.1:7999", "X-Forwarded-For $remote_addr"):
        assert line in text, line
