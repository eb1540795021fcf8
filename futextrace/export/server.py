"""The HTTP endpoint: --listen parsing, binding with one-line errors, and a
server that a slow, stuck or aborted scrape cannot take down.

Built on prometheus_client's WSGI app (it negotiates OpenMetrics or the
Prometheus text format from the scraper's Accept header). Each scrape runs in
its own thread; a client that sends nothing is dropped after REQUEST_TIMEOUT_S
so stuck connections cannot pile up, and a client that hangs up mid-answer
is ignored quietly (no traceback on stderr).
"""
from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from futextrace.errors import EnvironmentProblem, UsageError

DEFAULT_PORT = 9477
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
REQUEST_TIMEOUT_S = 10.0


def parse_listen(value: str) -> tuple[str, int]:
    """'ADDR:PORT' or '[IPv6]:PORT' -> (addr, port); ADDR may be a host name."""
    hint = f"give --listen ADDR:PORT, e.g. {DEFAULT_LISTEN}, 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT}"
    host, sep, port_s = value.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise UsageError(f"--listen {value!r} is not ADDR:PORT with a port 1-65535: {hint}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            host = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
        except (socket.gaierror, UnicodeError):
            raise UsageError(f"--listen {value!r}: cannot resolve {host!r}: {hint}") from None
    return host, int(port_s)


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S   # a scraper that connects and sends nothing is dropped

    def log_message(self, *args):
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass   # an aborted or timed-out scrape is the client's problem, not ours


class _Server6(_Server):
    address_family = socket.AF_INET6


def bind(addr: str, port: int, registry) -> WSGIServer:
    """Bind now (before anything is attached), serve later with `serve()`."""
    cls = _Server6 if ":" in addr else _Server
    try:
        return make_server(addr, port, make_wsgi_app(registry), cls, handler_class=_QuietHandler)
    except OSError as e:
        where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
        if e.errno == errno.EADDRINUSE:
            raise EnvironmentProblem(f"cannot listen on {where}: the port is in use; stop what uses "
                                     "it or choose another port with --listen") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"cannot listen on {where}: no such address on this host; "
                             "give one of its addresses with --listen") from None
        if e.errno == errno.EACCES:
            raise EnvironmentProblem(f"cannot listen on {where}: permission denied (ports below "
                                     "1024 need CAP_NET_BIND_SERVICE); choose another port") from None
        raise EnvironmentProblem(f"cannot listen on {where}: {e.strerror}") from None


def serve(server: WSGIServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, name="futextrace-http", daemon=True)
    t.start()
    return t
