"""The mode follows where the app really listens, and the owner's page answers only loopback names and its
own pages (``explorer.serve.host_guard``): over real HTTP against pages served on 127.0.0.1, with the Host and
Origin headers a DNS-rebinding or cross-site page would send."""

from __future__ import annotations

import asyncio
import socket

import gradio as gr
import pytest

from explorer.serve import host_guard
from explorer.serve.access import Access
from explorer.serve.host_guard import HostGuard, is_loopback, resolve_bind
from explorer.serve.page_guard import PageGuard
from explorer.serve.startup import start_page
from page_fixtures import loopback_http

# ---- where Gradio will listen -------------------------------------------------------------------------


@pytest.mark.parametrize("host, env, bind", [
    (None, None, "127.0.0.1"), ("", None, "127.0.0.1"),
    ("", "0.0.0.0", "0.0.0.0"), (None, "0.0.0.0", "0.0.0.0"), ("", "lab-box", "lab-box"),
    ("127.0.0.1", "0.0.0.0", "127.0.0.1"), ("::1", "0.0.0.0", "::1"),
    ("", "", "0.0.0.0"),  # an empty variable: uvicorn would listen on every interface
])
def test_the_bind_resolves_as_gradio_resolves_it(monkeypatch, host, env, bind):
    if env is None:
        monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    else:
        monkeypatch.setenv("GRADIO_SERVER_NAME", env)
    assert resolve_bind(host) == bind


def test_gradio_reads_its_server_name_so():
    """The rule ``resolve_bind`` copies, read in Gradio's own code: a change there must be seen here."""
    import inspect

    from gradio import blocks, http_server

    def code(source) -> str:
        return " ".join(inspect.getsource(source).split())

    assert 'server_name or os.getenv( "GRADIO_SERVER_NAME", "127.0.0.1" )' in code(blocks.Blocks.launch)
    assert "server_name = server_name or LOCALHOST_NAME" in code(http_server.start_server)
    assert 'LOCALHOST_NAME = os.getenv("GRADIO_SERVER_NAME", "127.0.0.1")' in code(http_server)


def test_only_loopback_binds_count_as_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.5", "lab-box", "localhost.evil.example"]))


def cli_launch(monkeypatch, tmp_path, *args, env=None) -> dict:
    """What ``python app.py ARGS`` hands to ``launch`` (which is not run), and what it printed."""
    from explorer import cli
    from explorer.ui import app as app_module

    seen = {}
    monkeypatch.setattr(app_module, "launch", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    if env is None:
        monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    else:
        monkeypatch.setenv("GRADIO_SERVER_NAME", env)
    assert cli.main(["app", "--checkpoints", str(tmp_path / "zoo"), *args]) == 0
    return seen


def test_an_empty_host_with_gradio_server_name_everywhere_is_a_public_page(monkeypatch, tmp_path, capsys):
    """Once "owner mode" while Gradio listened on every interface."""
    seen = cli_launch(monkeypatch, tmp_path, "--host", "", env="0.0.0.0")
    assert seen["host"] == "0.0.0.0" and seen["access"].public is True
    assert "public demo mode (listening on 0.0.0.0)" in capsys.readouterr().out
    seen = cli_launch(monkeypatch, tmp_path, env="0.0.0.0")  # no --host at all: the same
    assert seen["host"] == "0.0.0.0" and seen["access"].public is True
    seen = cli_launch(monkeypatch, tmp_path, "--host", "", "--trusted", "--auth", "me:secret", env="0.0.0.0")
    assert seen["host"] == "0.0.0.0" and seen["access"].public is False
    seen = cli_launch(monkeypatch, tmp_path, "--allow-host", "lab.example.org", "--allow-host", "Proxy:8443")
    assert seen["host"] == "127.0.0.1" and seen["access"].public is False
    assert seen["access"].hosts == ("lab.example.org", "proxy:8443")
    assert "owner mode on 127.0.0.1, answering at localhost, 127.0.0.1, [::1], lab.example.org" in capsys.readouterr().out


def test_a_bad_allow_host_is_refused_in_one_line(monkeypatch, tmp_path, capsys):
    from explorer import cli
    from explorer.ui import app as app_module

    monkeypatch.setattr(app_module, "launch", lambda **kwargs: None)
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    for bad in ("http://x/", "a b", "x:notaport", "", "me@x", "x/y", "[::1", "a..b"):
        assert cli.main(["app", "--checkpoints", str(tmp_path / "zoo"), "--allow-host", bad]) == 2
        assert "--allow-host takes a host name" in capsys.readouterr().err


def test_launch_hands_gradio_the_resolved_address_and_the_guard_of_its_mode(monkeypatch):
    from explorer.ui import app as app_module

    calls = []
    monkeypatch.setattr(app_module, "build_app", lambda zoo, access: gr.Blocks())
    monkeypatch.setattr(app_module, "warm_up", lambda: None)
    monkeypatch.setattr(gr.Blocks, "launch", lambda self, **kwargs: calls.append(kwargs))
    for env, host, public in (("0.0.0.0", "", True), ("0.0.0.0", "127.0.0.1", False), (None, None, False)):
        if env is None:
            monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
        else:
            monkeypatch.setenv("GRADIO_SERVER_NAME", env)
        calls.clear()
        app_module.launch(host=host, block=False)
        [options] = calls
        assert options["server_name"] == ("0.0.0.0" if public else "127.0.0.1") and options["ssr_mode"] is False
        guards = options["app_kwargs"].get("middleware", [])
        assert [m.cls for m in guards] == ([] if public else [HostGuard]) + [PageGuard]  # the host guard outermost


# ---- the guard over HTTP --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(access: Access, any_host: bool = False):
    """A small page served as the app serves its own (the same launch options), on 127.0.0.1."""
    from explorer.ui.app import page_options
    from explorer.ui.app import serve as queue

    calls = []
    with gr.Blocks() as app:
        box = gr.Textbox()
        gr.Button().click(lambda text: calls.append(text) or text, inputs=box, outputs=box, api_name="echo")
    queue(app, access)
    port = free_port()
    start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **page_options(access, any_host=any_host))
    return app, port, calls


@pytest.fixture(scope="module")
def owner_page(tmp_path_factory):
    app, port, calls = serve(Access(roots=(tmp_path_factory.mktemp("home"),), hosts=("lab.example.org",)))
    yield port, calls
    app.close()


def call(port: int, text: str, headers: dict | None = None) -> tuple[int, str]:
    """Join the queue with ``text`` and read the event stream to its end: (status, body or stream)."""
    http = loopback_http(f"http://127.0.0.1:{port}", timeout=30, headers=headers or {})
    config = http.get("/config")
    if config.status_code != 200:
        return config.status_code, config.text
    fn_index = config.json()["dependencies"][0]["id"]
    joined = http.post("/gradio_api/queue/join", json={"data": [text], "fn_index": fn_index,
                                                       "session_hash": text, "trigger_id": None})
    if joined.status_code != 200:
        return joined.status_code, joined.text
    seen = []
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": text}) as stream:
        for line in stream.iter_lines():
            seen.append(line)
            if any(end in line for end in ("process_completed", "close_stream", "unexpected_error")):
                break
        if stream.status_code != 200:
            stream.read()
        return stream.status_code, "\n".join(seen)


def test_the_owner_page_answers_loopback_names_with_or_without_the_port(owner_page):
    port, calls = owner_page
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "[::1]",
                 "lab.example.org", f"lab.example.org:{port}"):
        status, body = call(port, f"hello-{host}", {"Host": host})
        assert status == 200 and "process_completed" in body, (host, body)
    assert len(calls) == 8


def test_the_owner_page_refuses_a_foreign_host_in_one_line(owner_page):
    """DNS rebinding: the owner's browser, on evil.example, sends Host: evil.example to 127.0.0.1."""
    port, calls = owner_page
    http = loopback_http(f"http://127.0.0.1:{port}", timeout=30)
    before = len(calls)
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example",
                 "0.0.0.0", "lab.example.org.evil.example"):
        for method, path in (("GET", "/"), ("GET", "/config"), ("POST", "/gradio_api/queue/join"),
                             ("POST", "/gradio_api/upload")):
            reply = http.request(method, path, headers={"Host": host})
            assert reply.status_code == 403, (host, path)
            assert reply.text.count("\n") == 1
            assert "refused: this page answers only at localhost, 127.0.0.1, [::1], lab.example.org, not at" in reply.text
            assert "--allow-host" in reply.text
    assert call(port, "rebound", {"Host": "evil.example"})[0] == 403 and len(calls) == before


def test_the_owner_page_refuses_other_sites_pages(owner_page):
    """A page on another site posts to the owner's page (its Origin says where it is): nothing runs."""
    port, calls = owner_page
    before = len(calls)
    here = f"http://127.0.0.1:{port}"
    for origin in ("http://evil.example", f"http://localhost:{port + 1}", "null", f"https://127.0.0.1:{port}.evil"):
        status, body = call(port, "cross-site", {"Origin": origin})
        assert status == 403 and "may not send requests to this page" in body and body.count("\n") == 1, origin
        http = loopback_http(here, timeout=30, headers={"Origin": origin})
        assert http.post("/gradio_api/upload", files={"files": ("a.txt", b"x")}).status_code == 403
        assert http.get("/gradio_api/queue/data", params={"session_hash": "x"}).status_code == 403
    assert len(calls) == before
    # The page's own requests (same origin) and requests without an Origin (curl, the Python client) pass.
    assert call(port, "same-origin", {"Origin": here})[0] == 200
    assert call(port, "no-origin")[0] == 200
    # Behind a proxy that rewrites Host, the page's Origin is the proxy's name: allowed by --allow-host.
    assert call(port, "proxied", {"Origin": "https://lab.example.org", "Host": f"127.0.0.1:{port}"})[0] == 200
    assert len(calls) == before + 3


def test_a_trusted_page_answers_any_host_but_not_other_sites_pages(tmp_path):
    app, port, _ = serve(Access(roots=(tmp_path,)), any_host=True)
    try:
        assert call(port, "lab", {"Host": "lab-box:7860"})[0] == 200
        assert call(port, "lab-page", {"Host": "lab-box:7860", "Origin": "http://lab-box:7860"})[0] == 200
        assert call(port, "evil", {"Host": "lab-box:7860", "Origin": "http://evil.example"})[0] == 403
    finally:
        app.close()


def test_a_public_page_answers_any_host(tmp_path):
    app, port, calls = serve(Access(roots=(tmp_path,), public=True))
    try:
        status, body = call(port, "visitor", {"Host": "demo.example.org"})
        assert status == 200 and "process_completed" in body and calls == ["visitor"]
    finally:
        app.close()


def test_a_websocket_from_another_site_is_closed_before_it_opens():
    sent = []

    async def app(scope, receive, send):
        sent.append("reached the app")

    async def send(message):
        sent.append(message)

    scope = {"type": "websocket", "path": "/ws", "headers": [(b"host", b"localhost:7860"),
                                                             (b"origin", b"http://evil.example")]}
    asyncio.run(HostGuard(app)(scope, None, send))
    assert sent[0]["type"] == "websocket.close" and sent[0]["code"] == 1008 and len(sent) == 1
    scope["headers"] = [(b"host", b"localhost:7860"), (b"origin", b"http://localhost:7860")]
    asyncio.run(HostGuard(app)(scope, None, send))
    assert sent[-1] == "reached the app"


def test_the_guard_is_built_with_gradios_app():
    """No guard on a public page; the owner's names on the owner's."""
    assert host_guard.middleware(public=True) == []
    [middleware] = host_guard.middleware(public=False, hosts=("lab",))
    assert middleware.cls is HostGuard and middleware.kwargs == {"hosts": ("lab",), "check_host": True}
