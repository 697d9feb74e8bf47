"""``@idem.handler``: turns a function into the component's export."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

from . import _wit
from ._db import Db
from ._errors import Error, uncaught
from ._event import Event, from_wit

Handler = Callable[[Event, Db], None]


def handler(fn: Handler) -> Handler:
    """Makes ``fn(event, db)`` the component's ``handle`` export.

    componentize-py builds the component by importing the entry module (``app``)
    and instantiating the class ``WitWorld`` it finds there. So this decorator
    puts a ``WitWorld`` class into the module that defines ``fn``: decorate the
    handler in the entry module itself and it needs nothing else (no class, no
    import of the generated bindings). One handler per component.

    What the host is told:

    * ``fn`` returns: success; the host commits everything it did.
    * it raises an ``idem.Error`` (``Retryable``, ``Permanent``, or an SDK
      error such as ``DbError``): that error's ``retryable`` and message.
    * it raises any other ``Exception``: a permanent failure whose message is
      ``uncaught <type>: <message>`` and the last three traceback frames,
      as a bug will not go away by retrying (a Rust handler would panic).
    * a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
      ``KeyboardInterrupt``) is not caught: the instance traps, which the
      host also treats as permanent.
    """
    module = sys.modules[fn.__module__]
    installed = getattr(module, "WitWorld", None)
    if installed is not None and getattr(installed, "idem_handler", fn) is not fn:
        raise RuntimeError(f"{fn.__module__} already has a handler or a WitWorld class; a component has one handler")

    class WitWorld(_wit.WitWorld):
        """The export componentize-py calls: ``WitWorld().handle(event)``."""

        idem_handler = fn

        def handle(self, event: _wit.types.Event) -> None:
            run(fn, event)

    setattr(module, "WitWorld", WitWorld)
    # componentize-py snapshots the interpreter after importing the entry
    # module, and every instance starts from that snapshot, mapped
    # copy-on-write. The cyclic collector writes into every object it
    # tracks, so its first full pass in an instance would copy the whole
    # snapshot's heap (megabytes of page faults per instance): objects that
    # exist by now are moved out of its reach (they live as long as the
    # module anyway).
    gc.freeze()
    return fn


def run(fn: Handler, raw: _wit.types.Event) -> None:
    """Calls ``fn`` and turns its exceptions into the world's ``handler-error``
    (componentize-py maps exactly ``Err`` to the ``err`` case, and traps on
    any other exception)."""
    try:
        call(fn, raw)
    finally:
        # What the handler printed belongs to this event's log lines: an
        # instance may serve the next event (events_per_instance).
        flush()


def flush() -> None:
    """Flushes stdout and stderr; a stream that cannot be flushed is left."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def call(fn: Handler, raw: _wit.types.Event) -> None:
    """``run`` without the flush."""
    types = _wit.types
    failure: _wit.types.HandlerError
    try:
        fn(from_wit(raw), Db())
        return
    except Error as e:
        failure = types.HandlerError_Retryable(e.message) if e.retryable else types.HandlerError_Permanent(e.message)
    except Exception as e:
        # A bug: retrying will not fix it (see handler()).
        failure = types.HandlerError_Permanent(uncaught(e))
    # Raised outside the except blocks so no exception context is attached.
    raise _wit.Err(failure)
