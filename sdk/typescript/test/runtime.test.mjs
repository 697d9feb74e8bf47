// The component's `handle`: what it answers for each way a handler ends.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { Db, Event, handler, Permanent, Retryable } from '@idem/handler';
import { assertRegistered, handle } from '@idem/handler/runtime.js';
import { stackTail } from '@idem/handler/errors.js';
import { host, WorldError } from './mocks/host.mjs';

const RAW = {
    id: '0190f0f0-0000-7000-8000-00000000000a', eventType: 'order.confirmed.v1', occurredAt: '2026-11-30T00:00:00Z', topic: 't',
    partition: 0, offset: 1n, key: undefined, headers: [], payload: '{}', attempt: 1,
};

// One handler per process (node --test runs each file in its own): it runs `current`.
let current = () => {};
let seen;
beforeEach(() => host.reset());

test('before handler() is called, handle fails permanently and the build check throws', () => {
    assert.throws(assertRegistered, /never calls handler\(fn\)/);
    assert.deepEqual(handle(RAW), { tag: 'err', val: { tag: 'permanent', val: 'no handler: call handler(fn) in the handler module' } });
    handler((event, db) => {
        seen = [event, db];
        return current(event, db);
    });
    assertRegistered();
    assert.throws(() => handler(() => {}), /more than once/);
});

test('returning is ok; the handler gets an Event and a Db', () => {
    current = () => undefined;
    assert.deepEqual(handle(RAW), { tag: 'ok', val: undefined });
    assert.ok(seen[0] instanceof Event && seen[1] instanceof Db);
    assert.equal(seen[0].id, RAW.id);
});

const outcome = (fn) => {
    current = fn;
    return handle(RAW);
};

test('SDK and handler errors classify themselves', () => {
    assert.deepEqual(outcome(() => { throw new Retryable('no stock yet'); }), { tag: 'err', val: { tag: 'retryable', val: 'no stock yet' } });
    assert.deepEqual(outcome(() => { throw new Permanent('bad'); }), { tag: 'err', val: { tag: 'permanent', val: 'bad' } });
    host.execute = () => { throw new WorldError({ tag: 'transient', val: { code: '40P01', message: 'deadlock detected' } }); };
    assert.deepEqual(outcome((_, db) => db.execute('x')), { tag: 'err', val: { tag: 'retryable', val: 'database: transient error 40P01: deadlock detected' } });
    host.execute = () => { throw new WorldError({ tag: 'unique-violation', val: { code: '23505', message: 'dup' } }); };
    assert.deepEqual(outcome((_, db) => db.execute('x')), { tag: 'err', val: { tag: 'permanent', val: 'database: unique violation: dup' } });
});

test('anything else is permanent: name, message and the top of the stack', () => {
    const { val } = outcome(function chargeCustomer() { null.x; }).val;
    assert.match(val, /^TypeError: Cannot read properties of null \(reading 'x'\) \(at chargeCustomer \(.*runtime\.test\.mjs:\d+:\d+\) <- /);
    assert.deepEqual(outcome(() => { throw 'just a string'; }).val, { tag: 'permanent', val: 'thrown: just a string' });
    assert.deepEqual(outcome(() => { throw { code: 7, n: 1n }; }).val, { tag: 'permanent', val: 'thrown object: {"code":7,"n":"1"}' });
    assert.deepEqual(outcome(() => { throw null; }).val, { tag: 'permanent', val: 'thrown null: null' });
    // A world error escaping from a direct import call shows its payload.
    assert.match(outcome(() => { throw new WorldError({ tag: 'refused', val: 'no' }); }).val.val, /^Error: \{"tag":"refused","val":"no"\}/);
    const long = outcome(() => { throw new Error('x'.repeat(5000)); }).val.val;
    assert.equal(long.length, 2001);
});

test('a handler that returns a Promise fails: the world is synchronous', () => {
    const { val } = outcome(async () => {}).val;
    assert.equal(val, 'the handler returned a Promise: handlers are synchronous, remove `async`');
});

test('stack tails: SpiderMonkey frames, without the bindings', () => {
    const e = new Error('boom');
    e.stack = 'inner@source.js:10:5\nhandle@source.js:20:3\nexport_handle@/tmp/x/initializer.js:1277:29\n';
    assert.equal(stackTail(e), 'inner@source.js:10:5 <- handle@source.js:20:3');
    e.stack = '';
    assert.equal(stackTail(e), '');
});
