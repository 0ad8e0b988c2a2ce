"""Where the page listens, and who may address the owner's page.

- The bind: ``--host`` and ``$GRADIO_SERVER_NAME`` resolve as Gradio resolves them (an empty or absent
  host gives way to the variable, then to 127.0.0.1); the app passes the result to Gradio itself, so
  there is no second reading, and it decides the mode (any address others can reach is public unless
  ``--trusted``).
- The owner's page answers only requests addressed to this machine by a loopback name (``Host``:
  ``localhost``, ``127.0.0.1``, ``[::1]``, any port) or by a name given with ``--allow-host``: a web
  page the owner opens cannot reach it by DNS rebinding. It also refuses any request whose ``Origin``
  is another site: no other site's page can join its queue, post to it or read its event streams.
  This is Jupyter's rule. A public page answers any Host.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
from typing import Iterable
from urllib.parse import urlsplit

from explorer.core.errors import ExplorerError

SERVER_NAME_ENV = "GRADIO_SERVER_NAME"
DEFAULT_BIND = "127.0.0.1"
EVERY_INTERFACE = "0.0.0.0"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

log = logging.getLogger("explorer.access")


class HostNameError(ExplorerError):
    """An ``--allow-host`` value that is not a host name (with an optional port)."""


def resolve_bind(host: str | None) -> str:
    """The address Gradio binds for ``launch(server_name=host)``: ``host or $GRADIO_SERVER_NAME``, that
    variable defaulting to 127.0.0.1 (``gradio.blocks.Blocks.launch``, ``gradio.http_server.start_server``).
    An empty result would make uvicorn listen on every interface; it is named as such."""
    bound = host or os.environ.get(SERVER_NAME_ENV, DEFAULT_BIND)
    return bound or EVERY_INTERFACE


def is_loopback(bind: str) -> bool:
    """Whether only this machine reaches an app bound to ``bind`` (a resolved address, never empty)."""
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name, or every interface: others may reach it


def split_host(value: str) -> tuple[str, int | None]:
    """(name in lower case, port or None) of a ``Host`` header or an ``--allow-host`` value; ValueError
    if it is not one."""
    parts = urlsplit(f"//{value.strip()}")
    name = parts.hostname or ""
    if not (HOST_NAME.fullmatch(name) or _is_address(name)) or parts.username is not None or parts.path \
            or parts.query or parts.fragment:
        raise ValueError(value)
    return name, parts.port  # .port raises ValueError on a bad one


HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def host_names(values: Iterable[str]) -> tuple[str, ...]:
    """``--allow-host`` values, checked and in lower case (``NAME`` or ``NAME:PORT``)."""
    names = []
    for value in values:
        try:
            name, port = split_host(value)
        except ValueError:
            raise HostNameError(f"--allow-host takes a host name such as lab.example.org or lab.example.org:443, "
                                f"not {value!r}") from None
        names.append(name if port is None else f"{'[' + name + ']' if ':' in name else name}:{port}")
    return tuple(names)


def answered_names(hosts: Iterable[str] = ()) -> str:
    """The names the owner's page answers at, for people: loopback's, then ``--allow-host``'s."""
    return ", ".join(("localhost", "127.0.0.1", "[::1]", *hosts))


class HostGuard:
    """ASGI middleware in front of Gradio's routes (every HTTP route, event stream and websocket): a
    request not addressed to an allowed name (``check_host``), or sent by another site's page, gets a 403
    whose body is one line saying why."""

    def __init__(self, app, hosts: Iterable[str] = (), check_host: bool = True):
        self.app, self.check_host = app, check_host
        self.allowed = {split_host(value) for value in hosts}  # (name, port or None): any port if None
        self.names = answered_names(hosts)

    def addressed_to_us(self, name: str, port: int | None) -> bool:
        return name in LOOPBACK_NAMES or (name, None) in self.allowed or (name, port) in self.allowed

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused, or None."""
        try:
            name, port = split_host(host or "")
        except ValueError:
            name, port = "", None
        if self.check_host and not self.addressed_to_us(name, port):
            return (f"refused: this page answers only at {self.names}, not at {host!r}; "
                    f"if you own it and serve it under that name, start it with --allow-host {name or 'NAME'}")
        if origin is None:
            return None
        parts = urlsplit(origin)
        try:
            sender = (parts.hostname or "", parts.port)
        except ValueError:
            sender = ("", None)
        same_origin = bool(host) and parts.netloc.lower() == host.strip().lower()
        if same_origin or (sender[0] and (sender in self.allowed or (sender[0], None) in self.allowed)):
            return None
        return (f"refused: a page at {origin} may not send requests to this page (only its own pages may); if "
                f"you serve it under that name, start it with --allow-host {sender[0] or 'NAME'}")

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        reason = self.refusal(headers.get("host"), headers.get("origin"))
        if reason is None:
            return await self.app(scope, receive, send)
        log.warning("%s (%s %s)", reason, scope.get("method", "websocket"), scope.get("path"))
        if scope["type"] == "websocket":  # closed before it is accepted: the server answers 403
            return await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
        from starlette.responses import PlainTextResponse

        await PlainTextResponse(reason + "\n", status_code=403)(scope, receive, send)


def middleware(public: bool, hosts: Iterable[str] = (), any_host: bool = False) -> list:
    """The guard as Gradio's ``launch(app_kwargs={"middleware": ...})`` takes it: built with Gradio's app (a
    middleware added once it serves could miss the first requests), first in the list (outermost), so a
    refused request reaches nothing else. ``any_host``: others reach this owner's page by design
    (``--trusted``): every Host is answered, other sites' pages still are not. A public page answers any
    Host and Origin: no guard."""
    if public:
        return []
    from starlette.middleware import Middleware

    return [Middleware(HostGuard, hosts=tuple(hosts), check_host=not any_host)]
