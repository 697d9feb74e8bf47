// The Event: fields as the world gives them, the payload parsed once, payloadAs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Event, Permanent } from '@idem/handler';
import { host } from './mocks/host.mjs';

const raw = (payload) => ({
    id: '0190f0f0-0000-7000-8000-00000000000a',
    eventType: 'order.confirmed.v1',
    occurredAt: '2026-11-30T00:00:00Z',
    topic: 'orders.confirmed',
    partition: 2,
    offset: 9007199254740993n,
    key: new TextEncoder().encode('42'),
    headers: [{ name: 'h', value: new TextEncoder().encode('v') }, { name: 'nil', value: undefined }],
    payload,
    attempt: 3,
});

test('fields', () => {
    const e = new Event(raw('{}'));
    assert.deepEqual(
        [e.id, e.eventType, e.occurredAt, e.topic, e.partition, e.offset, e.attempt, e.payloadText],
        ['0190f0f0-0000-7000-8000-00000000000a', 'order.confirmed.v1', '2026-11-30T00:00:00Z', 'orders.confirmed', 2, 9007199254740993n, 3, '{}'],
    );
    assert.deepEqual(e.key, new TextEncoder().encode('42'));
    assert.equal(e.headerText('h'), 'v');
    assert.equal(e.header('nil'), undefined);
    assert.equal(e.header('absent'), undefined);
    assert.equal(e.headers.length, 2);
});

test('valueBytes: the record as framed, or else the payload as UTF-8', () => {
    host.reset();
    const e = new Event(raw('{"a":"é"}'));
    assert.deepEqual(e.valueBytes, new TextEncoder().encode('{"a":"é"}'));
    assert.equal(e.schemaId, undefined);
    const framed = new Uint8Array([0, 0, 0, 0, 7, 2]);
    host.origin = { value: framed, schemaId: 7 };
    assert.deepEqual([e.valueBytes, e.schemaId], [framed, 7]);
    assert.deepEqual(host.calls.map((c) => c[0]), ['origin.value', 'origin.schemaId', 'origin.value', 'origin.schemaId']);
});

test('the payload is parsed once, on first use', () => {
    const e = new Event(raw('{"orderId":42,"lines":[1,2]}'));
    assert.equal(e.payload, e.payload);
    assert.deepEqual(e.payload, { orderId: 42, lines: [1, 2] });
    assert.equal(e.payloadAs(), e.payload);
    const bad = new Event(raw('not json'));
    assert.throws(() => bad.payload, { constructor: Permanent, message: /^payload is not JSON: / });
});

test('payloadAs with a check: false or a throw is Permanent', () => {
    const e = new Event(raw('{"orderId":"42"}'));
    const isOrder = (p) => typeof p?.orderId === 'number';
    assert.throws(() => e.payloadAs(isOrder), { constructor: Permanent, message: "payload does not fit the handler's type" });
    const parse = (p) => {
        if (typeof p.orderId !== 'number') throw new TypeError('orderId is not a number');
    };
    assert.throws(() => e.payloadAs(parse), { constructor: Permanent, message: "payload does not fit the handler's type: orderId is not a number" });
    const good = new Event(raw('{"orderId":42}'));
    assert.deepEqual(good.payloadAs(isOrder), { orderId: 42 });
    assert.deepEqual(good.payloadAs(parse), { orderId: 42 });
});

test('integers outside the safe range are bigints, never rounded, or refused on request', () => {
    const text = '{"orderId":9007199254740993,"amount":-9223372036854775808,"max":9223372036854775807,' +
        '"safe":9007199254740991,"ratio":1.2345678901234567,"exp":12345678901234567e2,"s":"12345678901234567890","list":[18446744073709551615,1]}';
    const e = new Event(raw(text));
    const p = e.payload;
    assert.equal(p.orderId, 9007199254740993n);
    assert.equal(p.amount, -9223372036854775808n);
    assert.equal(p.max, 9223372036854775807n);
    assert.equal(p.safe, 9007199254740991, 'a safe integer stays a number');
    assert.equal(typeof p.ratio, 'number');
    assert.equal(typeof p.exp, 'number', 'an exponent is not an integer token');
    assert.equal(p.s, '12345678901234567890', 'a string stays a string');
    assert.deepEqual(p.list, [18446744073709551615n, 1]);
    assert.equal(e.payloadAs(), p);
    assert.throws(() => e.payloadAs(undefined, { bigIntegers: 'refuse' }), {
        constructor: Permanent,
        message: /^payload: the integer 9007199254740993 is outside JavaScript's safe range/,
    });
    // Text without such an integer parses as JSON.parse does, __proto__ included.
    const plain = new Event(raw('{"a":[1,2.5,"x"],"__proto__":{"b":1}}'));
    assert.deepEqual(plain.payload, JSON.parse('{"a":[1,2.5,"x"],"__proto__":{"b":1}}'));
    const both = new Event(raw('{"__proto__":{"b":1},"n":9007199254740993}'));
    assert.equal(Object.getPrototypeOf(both.payload), Object.prototype, '__proto__ is an own key');
    assert.deepEqual(Object.keys(both.payload), ['__proto__', 'n']);
    assert.deepEqual(plain.payloadAs(undefined, { bigIntegers: 'refuse' }), plain.payload, 'a safe payload is not refused');
});
