"""How a handler fails, and how the SDK classifies its own errors.

The host rolls back everything a failed handler did; it then executes the
event again later if the failure is *retryable*, and dead-letters it at once
if it is *permanent*. Raise ``Retryable`` or ``Permanent`` to choose; the
SDK's errors derive from ``Error`` too and carry ``retryable`` already.
"""

from __future__ import annotations

import re
import traceback
from typing import Literal

DbErrorKind = Literal["unique-violation", "transient", "other", "refused", "invalid-value"]
HttpErrorKind = Literal["denied", "invalid-request", "timeout", "connection"]
EmitErrorKind = Literal["refused", "invalid"]

# The host keeps 2,000 characters of a guest's message: the exception's text
# gets most of it, and the traceback tail loses its outer frames first.
_UNCAUGHT_MAX = 1_900
_UNCAUGHT_HEAD = 1_200
_UNCAUGHT_FRAMES = 3
# componentize-py imports the app at build time from directories mounted as
# /0, /1, ...: the paths it recorded say nothing to the reader, the file does.
_MOUNT = re.compile(r"^/\d+/")


class Error(Exception):
    """A classified handler failure. ``retryable`` says whether executing the
    event again later may succeed; ``message`` is what the host records."""

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Retryable(Error):
    """A failure that may pass if the event is executed again later (a
    dependency that is down, stock not there yet)."""

    retryable = True


class Permanent(Error):
    """A failure that executing the event again will not fix (bad data, a
    missing config key): the event is dead-lettered."""

    retryable = False


class DbError(Error):
    """A statement failed; it was undone alone and the handler may go on.

    ``kind`` is the host's classification; only ``"transient"`` (serialization
    failure, deadlock, lock or statement timeout) is retryable. ``code`` is the
    SQLSTATE and ``constraint`` the violated constraint, when PostgreSQL said.
    """

    kind: DbErrorKind

    def __init__(self, kind: DbErrorKind, detail: str, code: str | None = None, constraint: str | None = None) -> None:
        self.kind, self.detail, self.code, self.constraint = kind, detail, code, constraint
        self.retryable = kind == "transient"
        super().__init__(f"database: {_describe_db(kind, detail, code)}")


class UniqueViolation(DbError):
    """SQLSTATE 23505. The statement was undone and the transaction goes on:
    catch it when a duplicate is expected. Permanent if left uncaught."""

    def __init__(self, detail: str, code: str = "23505", constraint: str | None = None) -> None:
        super().__init__("unique-violation", detail, code, constraint)


def _describe_db(kind: DbErrorKind, detail: str, code: str | None) -> str:
    if kind == "unique-violation":
        return f"unique violation: {detail}"
    if kind == "transient":
        return f"transient error {code}: {detail}"
    if kind == "other":
        return f"error {code}: {detail}"
    if kind == "refused":
        return f"statement refused: {detail}"
    return f"invalid value: {detail}"


class HttpError(Error):
    """A request got no response. ``"timeout"`` and ``"connection"`` are
    retryable (re-sending reuses the same idempotency key); ``"denied"`` (URL
    outside the allowlist) and ``"invalid-request"`` are permanent."""

    kind: HttpErrorKind

    def __init__(self, kind: HttpErrorKind, detail: str) -> None:
        self.kind, self.detail = kind, detail
        self.retryable = kind in ("timeout", "connection")
        super().__init__(f"http: {kind.replace('-', ' ')}: {detail}")


class HttpStatusError(Error):
    """A non-2xx response, from ``Response.raise_for_status``: 408, 425, 429
    and 5xx are retryable, other statuses permanent."""

    def __init__(self, status: int, body_text: str) -> None:
        self.status = status
        self.retryable = status in (408, 425, 429) or status >= 500
        super().__init__(f"HTTP {status}: {body_text[:200]}")


class EmitError(Error):
    """An event was not accepted: ``"refused"`` (topic, event type, header or
    a cap not allowed) or ``"invalid"`` (payload not an object, or failing the
    topic's schema). Always permanent: the configuration or code must change."""

    kind: EmitErrorKind

    def __init__(self, kind: EmitErrorKind, detail: str) -> None:
        self.kind, self.detail = kind, detail
        super().__init__(f"emit {kind}: {detail}")


def uncaught(exc: BaseException) -> str:
    """The permanent error text for an exception that is not an ``Error``:
    its type, its message and the last frames of its traceback."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    head = f"uncaught {name}: {exc}"[:_UNCAUGHT_HEAD]
    # The SDK's own call into the handler is always the outermost frame: noise.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith("idem/_handler.py")]
    # Inside a component there are no source files, so no source lines either.
    tail = "\n".join(
        f'  File "{_MOUNT.sub("", f.filename)}", line {f.lineno}, in {f.name}' + (f"\n    {f.line}" if f.line else "")
        for f in frames[-_UNCAUGHT_FRAMES:]
    )
    room = _UNCAUGHT_MAX - len(head) - 1
    return f"{head}\n{tail[-room:]}" if tail else head
