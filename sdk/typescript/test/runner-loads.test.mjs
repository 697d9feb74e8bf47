// The quick runner (src/runner.ts) with a project's bundle handed over as
// `idem.test.sources`: evaluated once, at the first event, with a
// `require` that answers this SDK. (Its load is kept for the process, so
// each way it can end is a file of its own: runner-refuses.test.mjs.)
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { handle } from '@idem/handler/runner.js';
import { host } from './mocks/host.mjs';

const RAW = {
    id: '0190f0f0-0000-7000-8000-00000000000a', eventType: 'order.confirmed.v1', occurredAt: '2026-11-30T00:00:00Z', topic: 't',
    partition: 0, offset: 1n, key: undefined, headers: [], payload: '{"amount": 5}', attempt: 1,
};

// What esbuild's --quick bundle looks like: CommonJS, the SDK required.
const BUNDLE = `"use strict";
var sdk = require("@idem/handler");
var loads = (globalThis.loads ?? 0) + 1;
globalThis.loads = loads;
sdk.handler((event, db) => {
    db.execute("INSERT INTO t (amount) VALUES ($1)", [event.payloadAs().amount]);
    if (event.payloadAs().amount < 0) throw new sdk.Retryable("negative, for now");
});`;

test("the project's bundle is evaluated once, at the first event, and its handler runs on this SDK", () => {
    host.config = { 'idem.test.sources': JSON.stringify({ 'handler.js': BUNDLE }) };
    assert.deepEqual(handle(RAW), { tag: 'ok', val: undefined });
    assert.deepEqual(handle(RAW), { tag: 'ok', val: undefined });
    assert.equal(globalThis.loads, 1, 'evaluated once');
    const executed = host.calls.filter(([name]) => name === 'db.execute');
    assert.equal(executed.length, 2);
    // The SDK's own classes reach the runner's classification: a Retryable stays retryable.
    assert.deepEqual(handle({ ...RAW, payload: '{"amount": -1}' }), { tag: 'err', val: { tag: 'retryable', val: 'negative, for now' } });
});
