// The billing example (examples/billing/src/lib.rs) in TypeScript, the same
// behaviour: one `order.confirmed.v1` event → one row in `billing.charge`
// and one charge at the payment provider; with `payment_requests_topic`
// configured, also a `payment.requested.v1` event through the outbox.
// It uses examples/billing's migrations and schemas. Build it with
//   scripts/sdk/build-ts examples/billing-ts billing-ts.wasm
import { config, Db, emit, handler, http } from '@idem/handler';

/** The fields of `order.confirmed.v1` this handler reads (the host validated the rest). */
interface OrderConfirmed {
    orderId: number;
    customerId: number;
    totalAmount: number;
    currency: string;
}

handler((event, db) => {
    const order = event.payloadAs<OrderConfirmed>();
    // The amount binds as float8 even when whole, as the Rust example's f64 does.
    db.execute(
        'INSERT INTO billing.charge (event_id, order_id, customer_id, amount, currency) VALUES ($1, $2, $3, $4, $5)',
        [Db.uuid(event.id), order.orderId, order.customerId, Db.float64(order.totalAmount), order.currency],
    );
    // Keys in the order serde_json writes them, so the bodies are the Rust example's byte for byte.
    const request = { amount: order.totalAmount, currency: order.currency, orderId: order.orderId };
    // Published once this event's transaction commits, keyed by the order, or with
    // `payment_requests_key = "customer"` by the customer (a customer's requests then
    // reach `payments` in the order their charges committed).
    const topic = config.get('payment_requests_topic');
    if (topic !== undefined) {
        const key = config.get('payment_requests_key') === 'customer' ? order.customerId : order.orderId;
        emit.event(topic, 'payment.requested.v1').key(key).json(request).send();
    }
    // `charge_payment = "false"` leaves the provider out (the benchmark's database-only run).
    if (config.get('charge_payment') === 'false') return;
    // Carries `Idempotency-Key: <eventId>`, added by the host.
    http.post(`${config.require('payment_base_url')}/v1/charges`).json(request).send().raiseForStatus();
});
