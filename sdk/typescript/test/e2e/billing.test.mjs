// examples/billing-ts as a component: what it asks of the host, event by
// event, is what examples/billing (Rust) asks.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { host, WorldError } from '../mocks/host.mjs';
import { load, orderConfirmed, outcome } from './world.mjs';

const { handle } = await load('billing-ts');
const ORDER = { orderId: 42, customerId: 7, totalAmount: 10.25, currency: 'EUR' };
const INSERT = 'INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, $5)';
const text = (bytes) => new TextDecoder().decode(bytes);

beforeEach(() => {
    host.reset();
    host.config = { payment_base_url: 'http://127.0.0.1:18080' };
});

test('one charge row, one POST to the provider', () => {
    assert.equal(outcome(handle, orderConfirmed(ORDER)), 'ok');
    assert.equal(host.calls.length, 2);
    const [[, sql, params], [, request]] = host.calls;
    assert.equal(sql, INSERT);
    assert.deepEqual(params, [
        { tag: 'uuid', val: '0190f0f0-0000-7000-8000-00000000000a' },
        { tag: 'int64', val: 42n },
        { tag: 'int64', val: 7n },
        { tag: 'float64', val: 10.25 },
        { tag: 'text', val: 'EUR' },
    ]);
    assert.equal(request.method, 'POST');
    assert.equal(request.url, 'http://127.0.0.1:18080/v1/charges');
    assert.deepEqual(request.headers, [['content-type', 'application/json']]);
    assert.equal(request.label, undefined);
    // serde_json's order (keys sorted), as the Rust example sends it.
    assert.equal(text(request.body), '{"amount":10.25,"currency":"EUR","orderId":42}');
});

test('a whole amount still binds as float8', () => {
    outcome(handle, orderConfirmed({ ...ORDER, totalAmount: 10 }));
    assert.deepEqual(host.calls[0][2][3], { tag: 'float64', val: 10 });
});

test('charge_payment = "false" leaves the provider out', () => {
    host.config.charge_payment = 'false';
    assert.equal(outcome(handle, orderConfirmed(ORDER)), 'ok');
    assert.deepEqual(host.calls.map(([name]) => name), ['db.execute']);
});

test('payment_requests_topic: payment.requested.v1 keyed by the order, or by the customer', () => {
    host.config.payment_requests_topic = 'payments.requested';
    host.config.charge_payment = 'false';
    assert.equal(outcome(handle, orderConfirmed(ORDER)), 'ok');
    host.config.payment_requests_key = 'customer';
    assert.equal(outcome(handle, orderConfirmed(ORDER)), 'ok');
    const emitted = host.calls.filter(([name]) => name === 'emit.send').map(([, m]) => m);
    const message = (key) => ({
        topic: 'payments.requested',
        key,
        eventType: 'payment.requested.v1',
        payload: '{"amount":10.25,"currency":"EUR","orderId":42}',
        headers: [],
    });
    assert.deepEqual(emitted, [message('42'), message('7')]);
});

test('the provider answers: 5xx and 429 retryable, 4xx permanent', () => {
    for (const [status, tag] of [[503, 'retryable'], [429, 'retryable'], [402, 'permanent']]) {
        host.http = () => ({ status, headers: [], body: new TextEncoder().encode('no') });
        assert.deepEqual(outcome(handle, orderConfirmed(ORDER)), { tag, val: `HTTP ${status}: no` });
    }
    host.http = () => {
        throw new WorldError({ tag: 'timeout', val: 'no answer in 5000 ms' });
    };
    assert.deepEqual(outcome(handle, orderConfirmed(ORDER)), { tag: 'retryable', val: 'http: timeout: no answer in 5000 ms' });
});

test('database failures and a missing payment_base_url', () => {
    host.execute = () => {
        throw new WorldError({ tag: 'unique-violation', val: { code: '23505', message: 'duplicate key value violates unique constraint "charge_pkey"' } });
    };
    assert.deepEqual(outcome(handle, orderConfirmed(ORDER)), {
        tag: 'permanent',
        val: 'database: unique violation: duplicate key value violates unique constraint "charge_pkey"',
    });
    host.execute = () => {
        throw new WorldError({ tag: 'transient', val: { code: '40001', message: 'could not serialize access' } });
    };
    assert.deepEqual(outcome(handle, orderConfirmed(ORDER)), { tag: 'retryable', val: 'database: transient error 40001: could not serialize access' });
    host.reset();
    assert.deepEqual(outcome(handle, orderConfirmed(ORDER)), { tag: 'permanent', val: 'config key `payment_base_url` is not set for this handler' });
});
