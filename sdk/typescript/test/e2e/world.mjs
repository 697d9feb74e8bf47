// Loads a component that scripts/sdk/check-ts built and transpiled back to
// JavaScript (jco), and runs its `handle` as the host would: the world's
// imports are test/mocks (see ../hooks.mjs), WASI is jco's preview2-shim.
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export async function load(name) {
    const dir = process.env.IDEM_E2E_DIR;
    if (!dir) throw new Error('IDEM_E2E_DIR is not set: run scripts/sdk/check-ts');
    return import(pathToFileURL(join(dir, name, `${name}.js`)).href);
}

/** An `order.confirmed.v1` event as the host hands it over. */
export function orderConfirmed(order, attempt = 1) {
    const id = '0190f0f0-0000-7000-8000-00000000000a';
    const payload = { eventId: id, eventType: 'order.confirmed.v1', occurredAt: '2026-11-30T00:00:00Z', aggregateType: 'Order', ...order };
    return {
        id,
        eventType: 'order.confirmed.v1',
        occurredAt: '2026-11-30T00:00:00Z',
        topic: 'orders.confirmed',
        partition: 0,
        offset: 7n,
        key: new TextEncoder().encode(String(order.orderId)),
        headers: [],
        payload: JSON.stringify(payload),
        attempt,
    };
}

/** What `handle` answered: 'ok', or the handler-error variant it threw. */
export function outcome(handle, event) {
    try {
        handle(event);
        return 'ok';
    } catch (e) {
        if (e?.payload === undefined) throw e;
        return e.payload;
    }
}
