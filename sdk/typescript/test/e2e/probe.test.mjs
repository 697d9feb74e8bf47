// tests/guests/ts-probe as a component: every probe is recorded, none traps.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { host, WorldError } from '../mocks/host.mjs';
import { load, orderConfirmed, outcome } from './world.mjs';

const { handle } = await load('ts-probe');

test('five rows, one per probe, in order; nothing reached', () => {
    host.reset();
    host.http = () => {
        throw new WorldError({ tag: 'denied', val: 'http://127.0.0.1:5432/ is not under the allowlist' });
    };
    assert.equal(outcome(handle, orderConfirmed({ orderId: 1, customerId: 1, totalAmount: 1, currency: 'EUR' })), 'ok');
    const rows = host.calls.filter(([name]) => name === 'db.execute').map(([, sql, params]) => {
        assert.equal(sql, 'INSERT INTO notification.sent (event_id, customer_id, message) VALUES ($1, $2, $3)');
        return [params[0].val, params[1].val, params[2].val];
    });
    assert.deepEqual(rows, [
        ['0190f0f0-0000-7000-8000-00000000000b', 1n, 'read /etc/passwd: Error: no file API (require: undefined, Deno: undefined, Bun: undefined)'],
        [
            '0190f0f0-0000-7000-8000-000000000008',
            2n,
            "fetch http://127.0.0.1:5432/: TypeError: fetch() is not available in idem handlers (the component has no wasi:http); use the SDK's http.post(url)…send()",
        ],
        ['0190f0f0-0000-7000-8000-000000000009', 3n, 'tcp 127.0.0.1:5432: Error: no socket API (Deno: undefined, TCPSocket: undefined, navigator: undefined)'],
        ['0190f0f0-0000-7000-8000-00000000000e', 4n, 'http.get http://127.0.0.1:5432/: HttpError: http: denied: http://127.0.0.1:5432/ is not under the allowlist'],
        ['0190f0f0-0000-7000-8000-00000000000f', 5n, 'environment: Error: no environment API (process: undefined, Deno: undefined)'],
    ]);
});
