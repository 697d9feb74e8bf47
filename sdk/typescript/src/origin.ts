/**
 * The Kafka record the event being handled was read from, as it arrived.
 * {@link Event.valueBytes} is the usual way in.
 *
 * @module
 */

import * as wit from 'idem:handler/origin@0.1.0';

/**
 * The record's value byte for byte when the payload was decoded from it
 * (the registry's frame of an Avro, Protobuf or JSON Schema topic);
 * undefined on a JSON topic, whose value is the payload text itself.
 */
export function value(): Uint8Array | undefined {
    return wit.value();
}

/** The registry's id of the schema the record was written with, for a framed record. */
export function schemaId(): number | undefined {
    return wit.schemaId();
}
