// The quick runner (src/runner.ts) refusing a bundle: what it cannot give
// (a module other than @idem/handler) fails every event permanently,
// naming it, whatever the failure's class, and the bundle is not
// evaluated again.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { handle } from '@idem/handler/runner.js';
import { host } from './mocks/host.mjs';

const RAW = {
    id: '0190f0f0-0000-7000-8000-00000000000a', eventType: 'order.confirmed.v1', occurredAt: '2026-11-30T00:00:00Z', topic: 't',
    partition: 0, offset: 1n, key: undefined, headers: [], payload: '{}', attempt: 1,
};

const BUNDLE = `"use strict";
globalThis.loads = (globalThis.loads ?? 0) + 1;
var fs = require("node:fs");
require("@idem/handler").handler(() => {});`;

test('a module the runner does not have fails every event permanently, naming it', () => {
    host.config = { 'idem.test.sources': JSON.stringify({ 'handler.js': BUNDLE }) };
    for (let i = 0; i < 2; i++) {
        const { tag, val } = handle(RAW);
        assert.equal(tag, 'err');
        assert.equal(val.tag, 'permanent');
        assert.match(val.val, /^the handler's module failed to load: .*imports `node:fs`/);
    }
    assert.equal(globalThis.loads, 1, 'not evaluated again');
});
