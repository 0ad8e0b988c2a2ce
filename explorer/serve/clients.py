"""Who is asking: a visitor's address, its page sessions, and what it holds open, for per-address fairness.

The address is ``scope["client"]``: uvicorn rewrites it from ``X-Forwarded-For`` only when the direct peer is one
of ``--forwarded-allow-ips`` (``trusted_proxies``), so a client cannot name itself. ``Clients`` keeps, per address,
its page sessions (a cap each: minting past it forgets that address's own oldest session, never another's), how many
requests it has open (refused past a cap), and at most ``ADDRESSES_KEPT`` addresses (the least recently seen one with
nothing open is forgotten first). The queue's per-address caps and turns (``explorer.serve.queue_guard``) use ``address_of``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import threading
from collections import OrderedDict

from explorer.core.errors import ExplorerError

ADDRESSES_KEPT = 4096  # addresses whose sessions are remembered: with the per-address cap, bounded memory
PROXY_ENV = "FORWARDED_ALLOW_IPS"  # uvicorn reads its trusted proxies here when Gradio builds its server
UNKNOWN = "unknown"  # a request with no peer (a unix socket): one address for all of them


def address_of(scope) -> str:
    """The client's address as the server sees it (the proxy's word for it only when the proxy is trusted), as a
    client key (``client_key``: an IPv6 visitor by its /64)."""
    client = scope.get("client") if scope else None
    return client_key(str(client[0])) if client else UNKNOWN


IPV6_PREFIX = 64  # one IPv6 client is its /64: a home or a host is handed a whole /64 and picks addresses in it


def client_key(host: str) -> str:
    """The key fairness and caps count ``host`` under: an IPv4 address as it is (an IPv4-mapped IPv6 one too), an
    IPv6 address by its /64 network (one visitor can rotate through 2**64 addresses of its own), a name as it is."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if address.version == 4:
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.ip_network(f"{address}/{IPV6_PREFIX}", strict=False))


class ProxyListError(ExplorerError):
    """``--forwarded-allow-ips`` names something that is not an address, a network or ``*``."""


def proxy_list(value: str) -> str:
    """``value`` (uvicorn's convention: addresses and networks joined by commas, or ``*``), checked: uvicorn
    would take a typo as a name that no peer ever has, and the proxy's visitors would all be one address."""
    for part in value.split(","):
        part = part.strip()
        try:
            if part != "*":
                ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise ProxyListError(f"--forwarded-allow-ips takes addresses or networks joined by commas, or *; "
                                 f"{part!r} is neither") from None
    return value


@contextlib.contextmanager
def trusted_proxies(value: str | None):
    """While Gradio starts its server: uvicorn trusts ``X-Forwarded-For`` from ``value`` only (a comma list of
    addresses or networks, or ``*``); None: ``$FORWARDED_ALLOW_IPS`` if set, else nobody. Uvicorn's own default
    trusts loopback, and a page behind an SSH tunnel or a share link sees every visitor on loopback: any of
    them could then name any address and pass every per-address cap."""
    chosen = value if value is not None else os.environ.get(PROXY_ENV, "")
    before = os.environ.get(PROXY_ENV)
    os.environ[PROXY_ENV] = chosen  # "" matches no peer: the direct peer is the address
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PROXY_ENV, None)
        else:
            os.environ[PROXY_ENV] = before


class Clients:
    """Page sessions and open requests, per address (thread-safe; every operation is O(1) but forgetting an
    address, which walks the addresses from the least recently seen)."""

    def __init__(self, sessions_per_address: int, open_per_address: int | None, addresses_kept: int | None = None,
                 on_forget=None):
        self.sessions_per_address, self.open_per_address = sessions_per_address, open_per_address
        self.on_forget = on_forget  # called with the sessions forgotten (outside the lock): their uploads go
        self.addresses_kept = addresses_kept or ADDRESSES_KEPT
        self.addresses: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()  # least recently seen first
        self.owner: dict[str, str] = {}  # session token -> the address that minted it
        self.open: dict[str, int] = {}  # address -> requests in flight (only addresses with some)
        self.lock = threading.Lock()

    # ---- sessions ---------------------------------------------------------------------------------------

    def mint(self, address: str) -> str | None:
        """A new session for ``address``, or None when every remembered address is busy (nothing to forget).
        Sessions forgotten to make room are handed to ``on_forget`` (their uploads are deleted at once)."""
        forgotten: list[str] = []
        try:
            with self.lock:
                sessions = self.addresses.get(address)
                if sessions is None:
                    if len(self.addresses) >= self.addresses_kept and not self._forget_an_idle_address(forgotten):
                        return None
                    sessions = self.addresses[address] = OrderedDict()
                self.addresses.move_to_end(address)
                while len(sessions) >= self.sessions_per_address:  # this address's own oldest, nobody else's
                    token, _ = sessions.popitem(last=False)
                    del self.owner[token]
                    forgotten.append(token)
                token = secrets.token_urlsafe(24)
                sessions[token] = None
                self.owner[token] = address
                return token
        finally:
            if forgotten and self.on_forget is not None:
                self.on_forget(forgotten)

    def address_of_session(self, token: str) -> str | None:
        with self.lock:
            return self.owner.get(token)

    def knows(self, token: str | None) -> bool:
        """Whether ``token`` is a live session (and, if so, it and its address are now the most recently seen)."""
        with self.lock:
            address = self.owner.get(token) if token else None
            if address is None:
                return False
            self.addresses[address].move_to_end(token)
            self.addresses.move_to_end(address)
            return True

    def sessions_of(self, address: str) -> int:
        with self.lock:
            return len(self.addresses.get(address, ()))

    def _forget_an_idle_address(self, forgotten: list[str]) -> bool:
        for address in self.addresses:  # least recently seen first
            if not self.open.get(address):
                for token in self.addresses.pop(address):
                    del self.owner[token]
                    forgotten.append(token)
                return True
        return False

    # ---- open requests ----------------------------------------------------------------------------------

    def enter(self, address: str) -> bool:
        """Count a request from ``address`` as open; False (nothing counted) when it already has the cap."""
        with self.lock:
            held = self.open.get(address, 0)
            if self.open_per_address is not None and held >= self.open_per_address:
                return False
            self.open[address] = held + 1
            if address in self.addresses:
                self.addresses.move_to_end(address)
            return True

    def leave(self, address: str) -> None:
        with self.lock:
            held = self.open.get(address, 0) - 1
            if held > 0:
                self.open[address] = held
            else:
                self.open.pop(address, None)
