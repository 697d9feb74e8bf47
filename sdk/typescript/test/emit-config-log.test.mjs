// Emitted events, configuration and logging, as the host receives them.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { config, emit, log, Permanent } from '@idem/handler';
import { host } from './mocks/host.mjs';

beforeEach(() => host.reset());

test('emit: the message the host gets, and the eventId it answers', () => {
    const id = emit.event('payments.requested', 'payment.requested.v1').key(42).json({ orderId: 42, amount: 10.25, n: 5n }).header('h', 'v').send();
    assert.equal(id, '0190f0f0-0000-7000-8000-000000000001');
    assert.deepEqual(host.calls, [
        ['emit.send', { topic: 'payments.requested', key: '42', eventType: 'payment.requested.v1', payload: '{"orderId":42,"amount":10.25,"n":5}', headers: [['h', 'v']] }],
    ]);
});

test('emit: an empty key and an empty object unless given; bigint keys in decimal', () => {
    emit.event('t', 'e.v1').send();
    emit.event('t', 'e.v1').key(2n ** 63n - 1n).send();
    assert.deepEqual(host.calls.map(([, m]) => [m.key, m.payload]), [['', '{}'], ['9223372036854775807', '{}']]);
});

test('emit: a payload that is not serialisable is Permanent, nothing sent', () => {
    const cycle = {};
    cycle.self = cycle;
    assert.throws(() => emit.event('t', 'e.v1').json(cycle), { constructor: Permanent, message: /^json: / });
    assert.equal(host.calls.length, 0);
});

test('config: get and require', () => {
    host.config = { payment_base_url: 'http://127.0.0.1:18080', empty: '' };
    assert.equal(config.get('payment_base_url'), 'http://127.0.0.1:18080');
    assert.equal(config.get('missing'), undefined);
    assert.equal(config.require('empty'), '');
    assert.throws(() => config.require('missing'), { constructor: Permanent, retryable: false, message: 'config key `missing` is not set for this handler' });
});

test('log: one call per level', () => {
    log.trace('t');
    log.debug('d');
    log.info('i');
    log.warn('w');
    log.error('e');
    assert.deepEqual(host.logs, [['trace', 't'], ['debug', 'd'], ['info', 'i'], ['warn', 'w'], ['error', 'e']]);
});
