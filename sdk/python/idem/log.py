"""Log through the host, which tags every line with the handler's name and
the event id (so there is no need to repeat them in the message).

    idem.log.info(f"charged order {order.order_id}")
"""

from __future__ import annotations

from ._wit import log as wit

__all__ = ["debug", "error", "info", "trace", "warn"]


def trace(message: str) -> None:
    wit.log(wit.Level.TRACE, message)


def debug(message: str) -> None:
    wit.log(wit.Level.DEBUG, message)


def info(message: str) -> None:
    wit.log(wit.Level.INFO, message)


def warn(message: str) -> None:
    wit.log(wit.Level.WARN, message)


def error(message: str) -> None:
    wit.log(wit.Level.ERROR, message)
