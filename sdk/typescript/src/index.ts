/// <reference path="./globals.d.ts" preserve="true" />
/// <reference path="./wit/handler.d.ts" preserve="true" />

/**
 * Write an idem handler in TypeScript: a WebAssembly component that gets
 * one validated Kafka event at a time and whose effect the host commits
 * exactly once.
 *
 * The host has already done the hard part when your function runs: the
 * payload is valid JSON with a UUID v7 `eventId`, this `(eventId, handler)`
 * pair has been claimed inside a PostgreSQL transaction, and every
 * {@link Db} statement you run joins that transaction. Return and the host
 * commits your writes together with the claim; throw and nothing you wrote
 * survives.
 *
 * @example
 * ```ts
 * import { config, Db, handler, http } from "@idem/handler";
 *
 * interface OrderConfirmed { orderId: number; totalAmount: number; currency: string }
 *
 * handler((event, db) => {
 *     const order = event.payloadAs<OrderConfirmed>();
 *     db.execute(
 *         "INSERT INTO billing.charge (event_id, order_id, amount, currency) VALUES ($1, $2, $3, $4)",
 *         [Db.uuid(event.id), order.orderId, order.totalAmount, order.currency],
 *     );
 *     // Carries `Idempotency-Key: <eventId>`, added by the host.
 *     http.post(`${config.require("payment_base_url")}/v1/charges`).json({ orderId: order.orderId }).send().raiseForStatus();
 * });
 * ```
 *
 * Build it with `scripts/sdk/build-ts SRC_DIR OUT.wasm` (SRC_DIR holds
 * `handler.ts`); OUT.wasm is the component the host loads.
 *
 * @packageDocumentation
 */

export { handler, type Handler } from './runtime.js';
export { Event, type Header, type PayloadCheck } from './event.js';
export { Db, DbError, UniqueViolation, type DbErrorKind } from './db.js';
export { Rows, Row, type SqlValue, type JsonValue } from './rows.js';
export { SqlParam, type Param, type Value } from './values.js';
export { IdemError, Retryable, Permanent } from './errors.js';
export { HttpError, HttpStatusError } from './response.js';
export { EmitError } from './emit.js';
export * as http from './http.js';
export * as emit from './emit.js';
export * as config from './config.js';
export * as log from './log.js';
export * as origin from './origin.js';
