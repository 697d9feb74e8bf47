"""Outbound HTTP, with idempotency keys the host adds.

    import idem

    resp = idem.http.post(f"{base}/v1/charges").json({"orderId": 42}).send()
    resp.raise_for_status()
    idem.http.post(f"{mail}/v1/receipts").label("receipt").json({}).send()

Every unsafe request (POST, PUT, PATCH, DELETE) carries ``Idempotency-Key``,
set by the host and out of the handler's reach: the event id for the
invocation's main operation, ``<eventId>:<label>`` for any other one, named
with ``Request.label``. Re-sending the same request (after a timeout, or when
the event is executed again) reuses its key, so the provider applies it once.
Only URLs under the handler's allowlist (``[handler.http]``) are reached.

``send`` raises ``idem.HttpError`` when no response came back: retryable
for a timeout or a failed connection, permanent for a denied URL or an
invalid request. Any status is a ``Response``; ``raise_for_status`` turns a
non-2xx one into ``idem.HttpStatusError`` (retryable for 408, 425, 429, 5xx).
"""

from __future__ import annotations

import json
from typing import Any, Self

from ._errors import HttpError, HttpStatusError, Permanent
from ._values import dumps
from ._wit import Err
from ._wit import http as wit

__all__ = ["Request", "Response", "delete", "get", "patch", "post", "put"]


def get(url: str) -> Request:
    return Request("GET", url)


def post(url: str) -> Request:
    return Request("POST", url)


def put(url: str) -> Request:
    return Request("PUT", url)


def patch(url: str) -> Request:
    return Request("PATCH", url)


def delete(url: str) -> Request:
    return Request("DELETE", url)


class Request:
    """A request being built; nothing is sent before ``send``. Each builder
    method returns the request, so calls chain."""

    def __init__(self, method: str, url: str) -> None:
        self.method, self.url = method, url
        self.headers: list[tuple[str, str]] = []
        self.content: bytes | None = None
        self.operation: str | None = None

    def label(self, label: str) -> Self:
        """Names this operation when the invocation makes more than one unsafe
        request: its key becomes ``<eventId>:<label>``. Letters, digits, ``.``,
        ``_`` and ``-``, at most 64. Never derive it from data read, call order
        or the attempt number: it must be the same on every retry."""
        self.operation = label
        return self

    def header(self, name: str, value: str) -> Self:
        self.headers.append((name, value))
        return self

    def body(self, content: bytes) -> Self:
        self.content = bytes(content)
        return self

    def json(self, body: Any) -> Self:
        """Serializes ``body`` as compact JSON and sets ``Content-Type``; a
        value JSON cannot hold is a permanent ``HttpError`` at once."""
        try:
            self.content = dumps(body).encode()
        except (TypeError, ValueError) as e:
            raise HttpError("invalid-request", f"request body is not serializable: {e}") from None
        if not any(n.lower() == "content-type" for n, _ in self.headers):
            self.headers.append(("content-type", "application/json"))
        return self

    def send(self) -> Response:
        """Sends the request; returns the response whatever its status."""
        request = wit.Request(self.method, self.url, list(self.headers), self.content, self.operation)
        try:
            raw = wit.send(request)
        except Err as e:
            raise http_error(e.value) from None
        return Response(raw.status, raw.headers, raw.body)


def http_error(err: wit.HttpError) -> HttpError:
    if isinstance(err, wit.HttpError_Denied):
        return HttpError("denied", err.value)
    if isinstance(err, wit.HttpError_InvalidRequest):
        return HttpError("invalid-request", err.value)
    if isinstance(err, wit.HttpError_Timeout):
        return HttpError("timeout", err.value)
    return HttpError("connection", err.value)


class Response:
    """An HTTP response: ``status``, ``headers`` (``(name, value)`` pairs) and
    ``body`` (bytes)."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def header(self, name: str) -> str | None:
        """The first header called ``name``, compared case-insensitively."""
        return next((v for n, v in self.headers if n.lower() == name.lower()), None)

    def text(self) -> str:
        """The body as UTF-8, undecodable bytes replaced."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON; a body that is not JSON is ``Permanent``."""
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise Permanent(f"response body is not the expected JSON: {e}") from None

    def raise_for_status(self) -> Self:
        """Returns the response if its status is 2xx, else raises
        ``HttpStatusError``: retryable for 408, 425, 429 and 5xx, permanent
        for any other status."""
        if 200 <= self.status < 300:
            return self
        raise HttpStatusError(self.status, self.text())

    def __repr__(self) -> str:
        return f"Response(status={self.status}, body={len(self.body)} bytes)"
