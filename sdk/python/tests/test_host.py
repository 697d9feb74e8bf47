"""Value mapping, the host calls' error classification and the handler
export, against the generated bindings with the host functions faked."""

from __future__ import annotations

import sys
import unittest
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from types import ModuleType
from typing import Any
from unittest import mock
from uuid import UUID

import idem
from idem import _wit
from idem._handler import handler
from idem._values import from_value, to_value, to_values

from .test_payload import event


def _why_no_bindings() -> str:
    """Why the bindings do not import here ("" when they do)."""
    try:
        import componentize_py_types  # noqa: F401
        import wit_world.imports  # noqa: F401
    except ImportError as e:
        return str(e)
    return ""


# scripts/sdk/check-python generates the bindings and fails on any skip.
NEEDS = unittest.skipUnless(
    _wit.AVAILABLE,
    f"needs the wit_world bindings, which do not import here ({_why_no_bindings()}): "
    "scripts/sdk/check-python generates them",
)
ID = "01890a5d-ac96-774b-bcce-b302099a8057"


@NEEDS
class Values(unittest.TestCase):
    def test_python_values_map_to_the_variant(self) -> None:
        db = _wit.db
        when = datetime(2026, 11, 30, 1, 2, 3, 500000, tzinfo=timezone(timedelta(hours=1)))
        cases: list[tuple[object, Any]] = [
            (None, db.Value_Null()),
            (True, db.Value_Boolean(True)),  # bool is an int: it must not become int64
            (2**63 - 1, db.Value_Int64(2**63 - 1)),
            (1.5, db.Value_Float64(1.5)),
            ("text", db.Value_Text("text")),
            (event({}).id, db.Value_Uuid(ID)),
            (b"\x00", db.Value_Bytes(b"\x00")),
            (Decimal("1E+2"), db.Value_Numeric("100")),
            (UUID(ID), db.Value_Uuid(ID)),
            (when, db.Value_Timestamp("2026-11-30T01:02:03.500000+01:00")),
            ({"a": [1, "é"]}, db.Value_Json('{"a":[1,"é"]}')),
            ([1], db.Value_Json("[1]")),
        ]
        for value, expected in cases:
            self.assertEqual(to_value(value, 1), expected, value)

    def test_unbindable_values_are_permanent_db_errors_naming_the_parameter(self) -> None:
        for value, fragment in [(2**63, "$2: 9223372036854775808 is outside int64"),
                                (datetime(2026, 1, 1), "$2: naive datetime"),
                                ({1, 2}, "$2: cannot bind a set"),
                                ({"x": float("nan")}, "$2: not JSON-serializable")]:
            with self.assertRaises(idem.DbError) as caught:
                to_value(value, 2)
            self.assertEqual(caught.exception.kind, "invalid-value")
            self.assertFalse(caught.exception.retryable)
            self.assertIn(fragment, str(caught.exception))
        with self.assertRaises(idem.DbError):
            to_values("abc")  # a str is a sequence, of characters

    def test_column_values_map_back(self) -> None:
        db = _wit.db
        self.assertEqual(from_value(db.Value_Numeric("12.50")), Decimal("12.50"))
        self.assertEqual(from_value(db.Value_Uuid(ID)), UUID(ID))
        self.assertEqual(from_value(db.Value_Timestamp("2026-11-30T00:00:00.25Z")),
                         datetime(2026, 11, 30, 0, 0, 0, 250000, tzinfo=timezone.utc))
        self.assertEqual(from_value(db.Value_Json('{"a":1}')), {"a": 1})
        self.assertIsNone(from_value(db.Value_Null()))
        self.assertEqual(from_value(db.Value_Int64(3)), 3)


@NEEDS
class Db(unittest.TestCase):
    def test_query_rows_by_name_and_index(self) -> None:
        db = _wit.db
        raw = db.Rows(["n", "amount"], [[db.Value_Int64(1), db.Value_Numeric("2.50")]])
        with mock.patch.object(db, "query", return_value=raw) as query:
            rows = idem.Db().query("SELECT n, amount FROM t WHERE id = $1", (event({}).id,))
        query.assert_called_once_with("SELECT n, amount FROM t WHERE id = $1", [db.Value_Uuid(ID)])
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertEqual((row["n"], row[1], list(row)), (1, Decimal("2.50"), [1, Decimal("2.50")]))
        self.assertEqual([r["n"] for r in rows], [1])
        with self.assertRaises(KeyError):
            row["missing"]

    def test_db_errors_are_classified(self) -> None:
        db = _wit.db
        sql = db.SqlError("23505", "duplicate key", "charge_pkey")
        cases: list[tuple[Any, type[idem.DbError], bool]] = [
            (db.DbError_UniqueViolation(sql), idem.UniqueViolation, False),
            (db.DbError_Transient(db.SqlError("40001", "serialization", None)), idem.DbError, True),
            (db.DbError_Other(db.SqlError("23503", "fk", None)), idem.DbError, False),
            (db.DbError_Refused("DDL"), idem.DbError, False),
            (db.DbError_InvalidValue("bad uuid"), idem.DbError, False),
        ]
        for err, cls, retryable in cases:
            with mock.patch.object(db, "execute", side_effect=_wit.Err(err)):
                with self.assertRaises(cls) as caught:
                    idem.Db().execute("INSERT INTO t VALUES (1)")
            self.assertEqual(caught.exception.retryable, retryable, err)
        self.assertEqual(caught.exception.message, "database: invalid value: bad uuid")


@NEEDS
class HttpEmitConfig(unittest.TestCase):
    def test_a_request_is_built_and_its_response_classified(self) -> None:
        http = _wit.http
        with mock.patch.object(http, "send", return_value=http.Response(503, [("Retry-After", "1")], b"busy")) as send:
            resp = idem.http.post("http://p/v1/charges").label("fee").header("x-a", "1").json({"orderId": 1}).send()
        sent = send.call_args.args[0]
        self.assertEqual((sent.method, sent.url, sent.body, sent.label), ("POST", "http://p/v1/charges", b'{"orderId":1}', "fee"))
        self.assertEqual(sent.headers, [("x-a", "1"), ("content-type", "application/json")])
        self.assertEqual((resp.status, resp.text(), resp.header("retry-after")), (503, "busy", "1"))
        with self.assertRaises(idem.HttpStatusError) as caught:
            resp.raise_for_status()
        self.assertTrue(caught.exception.retryable)
        ok = idem.http.Response(200, [], b'{"id": 3}')
        self.assertEqual(ok.raise_for_status().json(), {"id": 3})
        for err, retryable in [(http.HttpError_Timeout("t"), True), (http.HttpError_Connection("c"), True),
                               (http.HttpError_Denied("d"), False), (http.HttpError_InvalidRequest("i"), False)]:
            with mock.patch.object(http, "send", side_effect=_wit.Err(err)), self.assertRaises(idem.HttpError) as c:
                idem.http.get("http://p/").send()
            self.assertEqual(c.exception.retryable, retryable)

    def test_emit_and_config(self) -> None:
        emit, config = _wit.emit, _wit.config
        with mock.patch.object(emit, "send", return_value="new-id") as send:
            self.assertEqual(idem.emit.event("t", "x.v1").key(42).json({"a": 1}).header("h", "v").send(), "new-id")
        self.assertEqual(send.call_args.args[0], emit.Message("t", "42", "x.v1", '{"a":1}', [("h", "v")]))
        with mock.patch.object(emit, "send", side_effect=_wit.Err(emit.EmitError_Refused("topic t"))):
            with self.assertRaises(idem.EmitError) as caught:
                idem.emit.event("t", "x.v1").send()
        self.assertEqual((caught.exception.retryable, str(caught.exception)), (False, "emit refused: topic t"))
        with mock.patch.object(config, "get", return_value=None), self.assertRaises(idem.Permanent) as missing:
            idem.config.require("payment_base_url")
        self.assertIn("`payment_base_url`", str(missing.exception))

    def test_value_bytes_are_the_records_frame_or_else_the_payload(self) -> None:
        origin, e = _wit.origin, event({"a": "é"})
        framed = b"\x00\x00\x00\x00\x07\x02"
        with mock.patch.object(origin, "value", return_value=framed), mock.patch.object(origin, "schema_id", return_value=7):
            self.assertEqual((e.value_bytes, e.schema_id), (framed, 7))
        with mock.patch.object(origin, "value", return_value=None), mock.patch.object(origin, "schema_id", return_value=None):
            self.assertEqual((e.value_bytes, e.schema_id), (e.payload_text.encode(), None))


@NEEDS
class Export(unittest.TestCase):
    def export(self, body: Any) -> Any:
        """Decorates ``body`` in a fresh module and returns the WitWorld it got."""
        module = ModuleType("fake_app")
        sys.modules["fake_app"] = module
        self.addCleanup(sys.modules.pop, "fake_app", None)
        body.__module__ = "fake_app"
        handler(body)
        return module.WitWorld

    def raw(self) -> Any:
        return _wit.types.Event(ID, "order.confirmed.v1", "2026-11-30T00:00:00Z", "t", 0, 1, None, [], "{}", 1)

    def test_outcomes_become_the_worlds_result(self) -> None:
        def fine(event: idem.Event, db: idem.Db) -> None:
            self.assertEqual(event.id, ID)

        self.assertIsNone(self.export(fine)().handle(self.raw()))
        types = _wit.types
        for exc, expected in [(idem.Retryable("later"), types.HandlerError_Retryable("later")),
                              (idem.DbError("transient", "deadlock", "40P01"),
                               types.HandlerError_Retryable("database: transient error 40P01: deadlock")),
                              (idem.Permanent("never"), types.HandlerError_Permanent("never"))]:
            def failing(event: idem.Event, db: idem.Db, exc: Exception = exc) -> None:
                raise exc

            with self.assertRaises(_wit.Err) as caught:
                self.export(failing)().handle(self.raw())
            self.assertEqual(caught.exception.value, expected)

    def test_any_other_exception_is_permanent_with_its_type(self) -> None:
        def buggy(event: idem.Event, db: idem.Db) -> None:
            payload: dict[str, int] = {}
            payload["orderId"]

        with self.assertRaises(_wit.Err) as caught:
            self.export(buggy)().handle(self.raw())
        self.assertIsInstance(caught.exception.value, _wit.types.HandlerError_Permanent)
        self.assertTrue(caught.exception.value.value.startswith("uncaught KeyError: 'orderId'\n"))
        self.assertIn("in buggy", caught.exception.value.value)

    def test_one_handler_per_module(self) -> None:
        def first(event: idem.Event, db: idem.Db) -> None: ...
        def second(event: idem.Event, db: idem.Db) -> None: ...

        first.__module__ = second.__module__ = "fake_app"
        self.export(first)
        with self.assertRaises(RuntimeError):
            handler(second)


if __name__ == "__main__":
    unittest.main()
