"""Running the app: the listening socket, bound before the proxy loads, and uvicorn with its timeouts.

`bind` refuses an address that is empty, not loopback-or-numeric, or that cannot be bound, at once;
`uvicorn_config` gives uvicorn the server's limits: request headers must arrive within
``header_timeout_s`` (a client that dribbles them is cut off), an idle keep-alive connection is closed
after ``keep_alive_s``, and a WebSocket message is at most ``max_body_bytes`` (plus its framing).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

from halluprobe.serving.config import ServeConfig

WS_FRAMING = 1024
"""Bytes a stream message may hold beyond ``max_body_bytes`` at the transport: the JSON around the text."""


def check_host(host: str) -> str:
    """``host`` as an address to bind: ``localhost`` or a literal IPv4/IPv6 address.

    Raises:
        ValueError: an empty host (which would bind every interface) or a name or number that is not an
            address, naming what is expected.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise ValueError(
            f"--host {host!r} is not an address; expected 127.0.0.1 (this machine only, the default), "
            "localhost, 0.0.0.0 (every interface) or another IPv4/IPv6 address of this machine"
        ) from None


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one; ``getsockname`` says which).

    Raises:
        ValueError: the host is not an address (`check_host`), or the address cannot be bound (in
            use, not an address of this machine), naming it.
    """
    address = check_host(host)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket (the port it really got)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_config(app: Any, config: ServeConfig, **kw: Any):
    """The ``uvicorn.Config`` of ``app`` with the server's timeouts and message bound."""
    import uvicorn

    return uvicorn.Config(
        app, http=_protocol(config.header_timeout_s), ws="websockets-sansio",
        ws_max_size=config.max_body_bytes + WS_FRAMING, timeout_keep_alive=config.keep_alive_s,
        timeout_graceful_shutdown=config.shutdown_timeout_s, **kw,
    )  # fmt: skip


def _protocol(header_timeout: float) -> type:
    """Uvicorn's h11 protocol with a deadline on the request line and headers of each request."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _upgraded = False  # a WebSocket owns the connection from then on: no HTTP deadline ever again

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._in_request() or self._upgraded:
                self._disarm()
            elif self._header_timer is None and self.timeout_keep_alive_task is None:
                self._arm()  # the next request has begun to arrive on a kept-alive connection

        def handle_websocket_upgrade(self, event) -> None:
            self._upgraded = True
            self._disarm()
            super().handle_websocket_upgrade(event)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _in_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if self._in_request() or self._upgraded or self.transport.is_closing():
                return
            body = b'{"error":"the request headers did not arrive in time"}'
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            self.transport.close()

    return TimedH11Protocol


def serve(app: Any, sock: socket.socket, config: ServeConfig, *, log_level: str = "info") -> None:
    """Serve ``app`` on the bound ``sock`` until SIGINT/SIGTERM (requests in flight are answered)."""
    import uvicorn

    server = uvicorn.Server(uvicorn_config(app, config, log_level=log_level, access_log=False))
    server.run(sockets=[sock])
