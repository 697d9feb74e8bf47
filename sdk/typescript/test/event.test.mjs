// The Event: fields as the world gives them, the payload parsed once, payloadAs.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Event, Permanent } from '@idem/handler';

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
