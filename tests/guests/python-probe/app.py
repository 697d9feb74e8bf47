"""A Python handler, built with the SDK, that tries to reach what the sandbox
must hide: the host's files, its network and its environment. It records
each attempt instead of failing, so that a test can read what it found.

In order, it tries to read /etc/passwd, list /, open a TCP connection to
127.0.0.1:5432, resolve `localhost` and read os.environ. Each attempt is one
row of notification.sent with message `<probe>: <outcome>`, where outcome is
the exception's class and message, or what was read, cut at 200 characters;
customer_id is the probe's number (1 to 5, in that order) and event_id the
event's id with its low bits XOR'd by that number (event_id is the table's
primary key). Then it returns normally.

Build: scripts/sdk/build-python tests/guests/python-probe OUT.wasm
"""

import os
import uuid
from collections.abc import Callable

import idem


def read_passwd() -> str:
    with open("/etc/passwd") as f:
        return f.read()


def list_root() -> str:
    return repr(sorted(os.listdir("/")))


def tcp_connect() -> str:
    # Imported here, not at the top: the module is imported when the
    # component is built, and a failing import must be an outcome, not a
    # failed build.
    import socket

    with socket.create_connection(("127.0.0.1", 5432), timeout=2) as conn:
        return f"connected to {conn.getpeername()}"


def resolve_localhost() -> str:
    import socket

    return repr(socket.getaddrinfo("localhost", 5432))


def read_environ() -> str:
    return repr(dict(os.environ))


PROBES: list[tuple[str, Callable[[], str]]] = [
    ("read /etc/passwd", read_passwd),
    ("list /", list_root),
    ("tcp 127.0.0.1:5432", tcp_connect),
    ("resolve localhost", resolve_localhost),
    ("os.environ", read_environ),
]


@idem.handler
def handle(event: idem.Event, db: idem.Db) -> None:
    for number, (probe, attempt) in enumerate(PROBES, start=1):
        try:
            outcome = attempt()
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
        db.execute(
            "INSERT INTO notification.sent (event_id, customer_id, message) VALUES ($1, $2, $3)",
            (uuid.UUID(int=uuid.UUID(event.id).int ^ number), number, f"{probe}: {outcome[:200]}"),
        )
