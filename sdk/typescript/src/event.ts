// The event being handled.

import type { Event as WitEvent } from 'idem:handler/types@0.1.0';
import { Permanent } from './errors.js';
import * as origin from './origin.js';
import { type BigIntegers, parse } from './json.js';

/** A Kafka record header; `value` is undefined for a null header. */
export interface Header {
    /** The header's name. */
    readonly name: string;
    /** Its value, undefined for a null one. */
    readonly value: Uint8Array | undefined;
}

/**
 * A check for {@link Event.payloadAs}: a type guard (`false` means the
 * payload does not fit), or a function that throws when it does not fit.
 */
export type PayloadCheck<T> = ((payload: unknown) => payload is T) | ((payload: unknown) => boolean | void);

/**
 * The event being handled: one Kafka record whose payload the host has
 * already validated (JSON, a UUID v7 `eventId`, an `eventType` the handler
 * takes, and the handler's JSON Schema when it has one).
 */
export class Event {
    /** The payload's `eventId`, a UUID v7 in text form: the key the host deduplicates on. Bind it with `Db.uuid(event.id)`. */
    readonly id: string;
    /** The payload's `eventType`, e.g. `order.confirmed.v1`. */
    readonly eventType: string;
    /** The payload's `occurredAt`, RFC 3339. */
    readonly occurredAt: string;
    /** The Kafka topic the record came from. */
    readonly topic: string;
    /** The record's partition. */
    readonly partition: number;
    /** The record's offset (a 64-bit integer, hence a bigint). */
    readonly offset: bigint;
    /** The record's key, if it has one. */
    readonly key: Uint8Array | undefined;
    /** The record's headers, in order. */
    readonly headers: readonly Header[];
    /** 1 on the first execution of this event by this host process, then 2, 3, … Never part of an idempotency key. */
    readonly attempt: number;
    /** The whole payload as JSON text. */
    readonly payloadText: string;
    #payload: { value: unknown } | undefined;

    /** @internal */
    constructor(raw: WitEvent) {
        this.id = raw.id;
        this.eventType = raw.eventType;
        this.occurredAt = raw.occurredAt;
        this.topic = raw.topic;
        this.partition = raw.partition;
        this.offset = raw.offset;
        this.key = raw.key;
        this.headers = raw.headers.map((h) => ({ name: h.name, value: h.value }));
        this.attempt = raw.attempt;
        this.payloadText = raw.payload;
    }

    /**
     * The payload, parsed once, on first use. An integer outside
     * JavaScript's safe range (±(2^53 − 1): a 64-bit id, an amount in
     * minor units) is a `bigint`, never a rounded `number`; other numbers
     * are doubles, as in `JSON.parse` (send exact decimals as strings).
     */
    get payload(): unknown {
        if (this.#payload === undefined) {
            this.#payload = { value: parsed(this.payloadText, 'bigint') };
        }
        return this.#payload.value;
    }

    /**
     * The payload as a `T`. Without `check` this is a cast (the host has
     * validated the payload against the handler's schema). With one, a
     * payload that fails it (`false`, or a throw) is a {@link Permanent}
     * error: retrying would not change it. An integer outside the safe
     * range is a `bigint` (type such fields `bigint` or `number | bigint`);
     * with `{ bigIntegers: 'refuse' }` such a payload is a
     * {@link Permanent} error naming the integer instead.
     *
     * @example
     * ```ts
     * interface OrderConfirmed { orderId: number; totalAmount: number }
     * const order = event.payloadAs<OrderConfirmed>();
     * const checked = event.payloadAs((p): p is OrderConfirmed => typeof (p as OrderConfirmed).orderId === "number");
     * const exact = event.payloadAs<OrderConfirmed>(undefined, { bigIntegers: 'refuse' });
     * ```
     */
    payloadAs<T>(check?: PayloadCheck<T>, options?: { bigIntegers?: BigIntegers }): T {
        const payload = options?.bigIntegers === 'refuse' ? parsed(this.payloadText, 'refuse') : this.payload;
        if (check !== undefined) {
            let fits: boolean | void;
            try {
                fits = check(payload);
            } catch (e) {
                throw new Permanent(`payload does not fit the handler's type: ${e instanceof Error ? e.message : String(e)}`);
            }
            if (fits === false) throw new Permanent("payload does not fit the handler's type");
        }
        return payload as T;
    }

    /**
     * The record's value as its producer wrote it: on an Avro, Protobuf or
     * JSON Schema topic the registry's frame (magic byte, schema id, body)
     * the payload was decoded from; on a JSON topic the payload's UTF-8
     * bytes, which are the value. Asked of the host on each read.
     */
    get valueBytes(): Uint8Array {
        return origin.value() ?? new TextEncoder().encode(this.payloadText);
    }

    /** The registry's id of the schema the record was written with (undefined on a JSON topic). */
    get schemaId(): number | undefined {
        return origin.schemaId();
    }

    /** The first header called `name`, if any (undefined also for a null header). */
    header(name: string): Uint8Array | undefined {
        return this.headers.find((h) => h.name === name)?.value;
    }

    /** {@link Event.header} as UTF-8 text. */
    headerText(name: string): string | undefined {
        const value = this.header(name);
        return value && new TextDecoder().decode(value);
    }
}

/** The payload's JSON, or the {@link Permanent} error saying why not. */
function parsed(text: string, big: BigIntegers): unknown {
    try {
        return parse(text, big);
    } catch (e) {
        if (e instanceof SyntaxError) throw new Permanent(`payload is not JSON: ${String(e)}`);
        throw new Permanent(`payload: ${e instanceof Error ? e.message : String(e)}`);
    }
}
