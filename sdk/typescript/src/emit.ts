/**
 * Publish events from a handler, exactly once per commit of the event that
 * emits them (the transactional outbox).
 *
 * An emitted event is written to the host's outbox in the same transaction
 * as everything else the handler does: if the handler fails, nothing is
 * published; once the transaction commits, the host publishes it to Kafka
 * (at least once, with the same `eventId`, so consumers deduplicate it), a
 * key's events in the order their transactions committed.
 *
 * The topic and event type must be configured for the handler
 * (`[[handler.emit]]`), and the payload must pass the topic's JSON Schema;
 * the host adds `eventId` (a fresh UUID v7), `eventType` and `occurredAt`
 * to it, and the headers `idem.causation-id` (this event's id),
 * `idem.correlation-id` and `traceparent`.
 *
 * @example
 * ```ts
 * const id = emit.event("payments.requested", "payment.requested.v1")
 *     .key(order.orderId)
 *     .json({ orderId: order.orderId, amount: 42.5 })
 *     .send();
 * ```
 *
 * @module
 */

import * as wit from 'idem:handler/emit@0.1.0';
import { IdemError, Permanent } from './errors.js';
import { stringify } from './json.js';

/** Starts an event of `eventType` on `topic`. */
export function event(topic: string, eventType: string): Emit {
    return new Emit(topic, eventType);
}

/** An event being built; nothing is written until {@link Emit.send}. */
export class Emit {
    readonly #message: wit.Message;

    /** @internal Start one with {@link event}. */
    constructor(topic: string, eventType: string) {
        this.#message = { topic, key: '', eventType, payload: '{}', headers: [] };
    }

    /** The record's key: the id of the aggregate the event is about (a number is written in decimal). */
    key(key: string | number | bigint): this {
        this.#message.key = String(key);
        return this;
    }

    /**
     * The payload, a JSON object (serialised here, a bigint as its exact integer).
     *
     * @throws {@link Permanent} when it is not serialisable.
     */
    json(payload: object): this {
        try {
            this.#message.payload = stringify(payload);
        } catch (e) {
            throw new Permanent(`json: ${String(e)}`);
        }
        return this;
    }

    /** A header of the record; names starting `idem.` and `traceparent` are the host's. */
    header(name: string, value: string): this {
        this.#message.headers.push([name, value]);
        return this;
    }

    /**
     * Accepts the event for publishing once this event's transaction
     * commits; returns the `eventId` it will carry.
     *
     * @throws {@link EmitError} (permanent) when the host refuses it.
     */
    send(): string {
        try {
            return wit.send(this.#message);
        } catch (e) {
            const payload = (e as { payload?: wit.EmitError } | null)?.payload;
            throw payload === undefined ? e : new EmitError(payload);
        }
    }
}

/**
 * Why an event was not accepted: `refused` (the topic, the event type, a
 * header, or one of `[handler.limits]`' caps) or `invalid` (not a JSON
 * object, or failing the topic's schema). Permanent: the handler's
 * configuration or code must change.
 */
export class EmitError extends IdemError {
    /** The world's `emit-error` case. */
    readonly kind: 'refused' | 'invalid';

    /** @internal */
    constructor(error: wit.EmitError) {
        super(`emit ${error.tag}: ${error.val}`, false);
        this.kind = error.tag;
    }
}
