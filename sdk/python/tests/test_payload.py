"""``Event.payload_as`` and the error texts: no bindings needed."""

from __future__ import annotations

import json
import unittest
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from uuid import UUID

import idem
from idem._errors import uncaught


def event(payload: dict[str, Any]) -> idem.Event:
    return idem.Event(
        id="01890a5d-ac96-774b-bcce-b302099a8057",
        event_type="order.confirmed.v1",
        occurred_at="2026-11-30T00:00:00Z",
        topic="orders.confirmed",
        partition=0,
        offset=7,
        key=b"42",
        headers=[("trace", b"x"), ("empty", None)],
        payload_text=json.dumps(payload),
        attempt=1,
    )


@dataclass
class Line:
    sku: str
    quantity: int


@dataclass
class Order:
    order_id: int
    total_amount: float
    currency: str
    paid: bool = False
    note: str | None = None
    lines: list[Line] = field(default_factory=list)
    price: Decimal | None = None
    customer: UUID | None = None


@dataclass
class Node:
    name: str
    children: list[Node] = field(default_factory=list)


@dataclass
class IntFirst:
    v: int | float


@dataclass
class FloatFirst:
    v: float | int


@dataclass
class MaybeDangling:
    order_id: int
    dangling: Dangling | None = None


@dataclass
class Dangling:
    missing: NoSuchType  # type: ignore[name-defined]  # noqa: F821


ORDER = {"orderId": 42, "totalAmount": 10, "currency": "EUR", "unknownKey": [1]}


class PayloadAs(unittest.TestCase):
    def test_camel_case_keys_map_to_fields_and_unknown_keys_are_ignored(self) -> None:
        order = event(ORDER).payload_as(Order)
        self.assertEqual(order, Order(order_id=42, total_amount=10.0, currency="EUR"))
        self.assertIsInstance(order.total_amount, float)

    def test_nested_values_convert(self) -> None:
        payload = {**ORDER, "lines": [{"sku": "a", "quantity": 1}], "price": "12.50", "note": None,
                   "customer": "01890a5d-ac96-774b-bcce-b302099a8057"}
        order = event(payload).payload_as(Order)
        self.assertEqual(order.lines, [Line("a", 1)])
        self.assertEqual(order.price, Decimal("12.50"))
        self.assertEqual(order.customer, UUID("01890a5d-ac96-774b-bcce-b302099a8057"))

    def assert_permanent(self, payload: dict[str, Any], message: str) -> None:
        with self.assertRaises(idem.Permanent) as caught:
            event(payload).payload_as(Order)
        self.assertFalse(caught.exception.retryable)
        self.assertEqual(str(caught.exception), message)

    def test_a_missing_field_is_permanent_and_named(self) -> None:
        self.assert_permanent({"totalAmount": 1, "currency": "EUR"}, "payload field `orderId` is missing")

    def test_an_ill_typed_field_is_permanent_and_named(self) -> None:
        self.assert_permanent({**ORDER, "orderId": "42"}, "payload field `orderId`: expected an integer, got string '42'")
        self.assert_permanent({**ORDER, "orderId": True}, "payload field `orderId`: expected an integer, got boolean True")
        self.assert_permanent({**ORDER, "orderId": 4.2}, "payload field `orderId`: expected an integer, got number 4.2")
        self.assert_permanent({**ORDER, "lines": [{"sku": "a", "quantity": 1}, {"sku": 3, "quantity": 1}]},
                              "payload field `lines[1].sku`: expected a string, got number 3")
        self.assert_permanent({**ORDER, "price": "cheap"},
                              "payload field `price`: expected a decimal number, got string 'cheap'")

    def test_each_conversion_checks_again(self) -> None:
        # The field plan is built once per class; the checks are not.
        self.assertEqual(event(ORDER).payload_as(Order).order_id, 42)
        self.assert_permanent({**ORDER, "orderId": "42"}, "payload field `orderId`: expected an integer, got string '42'")
        self.assertEqual(event({**ORDER, "orderId": 7}).payload_as(Order).order_id, 7)

    def test_a_dataclass_may_contain_itself(self) -> None:
        tree = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}
        built = event(tree).payload_as(Node)
        self.assertEqual(built, Node("a", [Node("b", [Node("c")]), Node("d")]))
        bad = {"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]}
        with self.assertRaises(idem.Permanent) as caught:
            event(bad).payload_as(Node)
        self.assertEqual(str(caught.exception), "payload field `children[0].children[0].name`: expected a string, got number 3")

    def test_a_union_tries_its_options_in_its_own_order(self) -> None:
        # Python holds `int | float` equal to `float | int`: neither may take
        # the other's reader.
        self.assertIsInstance(event({"v": 3}).payload_as(IntFirst).v, int)
        self.assertIsInstance(event({"v": 3}).payload_as(FloatFirst).v, float)
        self.assertIsInstance(event({"v": 3}).payload_as(IntFirst).v, int)

    def test_a_hint_that_does_not_resolve_fails_only_where_it_is_reached(self) -> None:
        self.assertEqual(event({"orderId": 1}).payload_as(MaybeDangling), MaybeDangling(1))
        with self.assertRaises(NameError):
            event({"orderId": 1, "dangling": {"missing": 1}}).payload_as(MaybeDangling)

    def test_a_hint_that_does_not_resolve_fails_every_time(self) -> None:
        for _ in range(2):
            with self.assertRaises(NameError):
                event({"missing": 1}).payload_as(Dangling)

    def test_only_dataclasses_are_built(self) -> None:
        with self.assertRaises(TypeError):
            event(ORDER).payload_as(dict)

    def test_the_payload_is_parsed_once(self) -> None:
        e = event(ORDER)
        self.assertIs(e.payload, e.payload)
        self.assertEqual(e.payload["orderId"], 42)
        self.assertEqual(e.header("trace"), b"x")
        self.assertIsNone(e.header("empty"))


@dataclass
class Exact:
    order_id: int
    amount: Decimal
    ratio: float
    extra: Any = None


@dataclass
class Priced:
    sku: str
    price: Decimal


@dataclass
class Basket:
    ratio: float
    items: list[Priced] = field(default_factory=list)
    tags: dict[str, Any] = field(default_factory=dict)


@dataclass
class Floats:
    ratio: float
    tags: dict[str, Any] = field(default_factory=dict)


class Numbers(unittest.TestCase):
    """Numbers are never rounded silently (around 2^53 and 2^63)."""

    def exact(self, text: str) -> Exact:
        e = event({})
        e.payload_text = text
        return e.payload_as(Exact)

    def test_integers_and_decimals_keep_every_digit(self) -> None:
        got = self.exact('{"orderId": 9007199254740993, "amount": 12345678901234567.891, "ratio": 0.5,'
                         ' "extra": {"big": 9223372036854775807, "d": 0.25}}')
        self.assertEqual(got.order_id, 9007199254740993)
        self.assertEqual(got.amount, Decimal("12345678901234567.891"))
        self.assertEqual(got.ratio, 0.5)
        self.assertEqual(got.extra, {"big": 9223372036854775807, "d": 0.25}, "Any: as Event.payload has it")
        self.assertEqual(self.exact('{"orderId": -9223372036854775808, "amount": 1, "ratio": 1}').order_id,
                         -9223372036854775808)

    def test_a_float_field_refuses_an_integer_it_would_round(self) -> None:
        with self.assertRaises(idem.Permanent) as caught:
            self.exact('{"orderId": 1, "amount": 1, "ratio": 9007199254740993}')
        self.assertIn("payload field `ratio`: the integer 9007199254740993 does not fit a float exactly",
                      str(caught.exception))
        # One a float holds exactly is fine, even beyond 2^53.
        self.assertEqual(self.exact('{"orderId": 1, "amount": 1, "ratio": 9007199254740992}').ratio, 2.0**53)

    def test_a_decimal_anywhere_in_the_class_keeps_its_digits(self) -> None:
        # A class with no Decimal reads its numbers as floats directly; one
        # reached through a list of dataclasses still gets the exact text.
        text = '{"ratio": 0.1000000000000000055511151231257827, "items": [{"sku": "a", "price": 0.1000000000000000055511151231257827}]}'
        e = event({})
        e.payload_text = text
        basket = e.payload_as(Basket)
        self.assertEqual(basket.items[0].price, Decimal("0.1000000000000000055511151231257827"))
        self.assertEqual(basket.ratio, 0.1)
        e = event({})
        e.payload_text = '{"ratio": 0.1000000000000000055511151231257827, "tags": {"x": 2.5, "n": 9007199254740993}}'
        floats = e.payload_as(Floats)
        self.assertEqual((floats.ratio, floats.tags), (0.1, {"x": 2.5, "n": 9007199254740993}))
        self.assertIsInstance(floats.tags["x"], float)


class Errors(unittest.TestCase):
    def test_classification(self) -> None:
        self.assertTrue(idem.Retryable("later").retryable)
        self.assertFalse(idem.Permanent("never").retryable)
        self.assertTrue(idem.DbError("transient", "deadlock detected", "40P01").retryable)
        self.assertEqual(str(idem.DbError("transient", "deadlock detected", "40P01")),
                         "database: transient error 40P01: deadlock detected")
        self.assertFalse(idem.UniqueViolation("duplicate key").retryable)
        self.assertTrue(idem.HttpError("timeout", "5 s").retryable)
        self.assertTrue(idem.HttpError("connection", "reset").retryable)
        self.assertFalse(idem.HttpError("denied", "not allowed").retryable)
        self.assertEqual(str(idem.HttpError("invalid-request", "bad")), "http: invalid request: bad")
        for status in (408, 425, 429, 500, 503):
            self.assertTrue(idem.HttpStatusError(status, "").retryable, status)
        for status in (400, 404, 409, 422):
            self.assertFalse(idem.HttpStatusError(status, "").retryable, status)
        self.assertEqual(str(idem.HttpStatusError(502, "x" * 300)), "HTTP 502: " + "x" * 200)
        self.assertFalse(idem.EmitError("refused", "topic").retryable)

    def test_an_uncaught_exception_names_its_type_message_and_frames(self) -> None:
        def inner() -> None:
            raise ValueError("boom")

        try:
            inner()
        except ValueError as e:
            text = uncaught(e)
        self.assertTrue(text.startswith("uncaught ValueError: boom\n"), text)
        self.assertIn('raise ValueError("boom")', text)
        self.assertLessEqual(len(uncaught(RuntimeError("x" * 5000))), 1900)
        self.assertTrue(uncaught(json.JSONDecodeError("bad", "", 0)).startswith("uncaught json.decoder.JSONDecodeError"))


if __name__ == "__main__":
    unittest.main()
