// JavaScript values to the world's `value` variant (statement parameters).

/**
 * The world's `value` variant, as parameters and columns travel between
 * the handler and the host. (Spelled out rather than re-exported from
 * src/wit so that the reference documents it; the compiler checks that it
 * is the world's type both ways, where the SDK passes and receives one.)
 */
export type Value =
    | { tag: 'null' }
    | { tag: 'boolean'; val: boolean }
    | { tag: 'int64'; val: bigint }
    | { tag: 'float64'; val: number }
    | { tag: 'text'; val: string }
    | { tag: 'bytes'; val: Uint8Array }
    /** JSON text, bound as `jsonb`. */
    | { tag: 'json'; val: string }
    /** A UUID in text form, bound as `uuid`. */
    | { tag: 'uuid'; val: string }
    /** An RFC 3339 timestamp, bound as `timestamptz`. */
    | { tag: 'timestamp'; val: string }
    /** A decimal number in text form, bound as `numeric`. */
    | { tag: 'numeric'; val: string };
import { stringify } from './json.js';

/**
 * A parameter typed explicitly, for the PostgreSQL types JavaScript has no
 * value of its own for (uuid, numeric) or to override the natural mapping
 * (a float that happens to be whole, a string bound as JSON). Made by
 * {@link Db.uuid}, {@link Db.numeric} and the other `Db` statics.
 */
export class SqlParam {
    /** @internal */
    constructor(readonly value: Value) {}
}

/**
 * What a statement parameter may be, and how it binds:
 *
 * | JavaScript                   | PostgreSQL parameter type |
 * | ---------------------------- | ------------------------- |
 * | `null`, `undefined`          | untyped NULL (inferred)   |
 * | `boolean`                    | `bool`                    |
 * | `number`, a safe integer     | `int8`                    |
 * | `number`, any other          | `float8`                  |
 * | `bigint` (64-bit signed)     | `int8`                    |
 * | `string`                     | `text`                    |
 * | `Uint8Array`                 | `bytea`                   |
 * | `Date`                       | `timestamptz`             |
 * | plain object or array        | `jsonb` (anything else: use `Db.json`) |
 * | {@link SqlParam} (`Db.uuid(…)`, `Db.numeric(…)`, …) | as it says |
 *
 * PostgreSQL casts on assignment where it can (an `int8` into a `numeric`
 * column), but not from `text`: bind a UUID with `Db.uuid(s)`.
 */
export type Param =
    | null
    | undefined
    | boolean
    | number
    | bigint
    | string
    | Uint8Array
    | Date
    | SqlParam
    // A plain object or array (checked when bound: a Map, say, is refused).
    | object;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * The world's `value` for `param`; a value that cannot be bound (a
 * function, a symbol, a bigint beyond 64 bits, an invalid Date) is a
 * TypeError naming the parameter's position (`$1`, `$2`, …).
 *
 * @internal
 */
export function toValue(param: unknown, position: number): Value {
    const fail = (why: string): never => {
        throw new TypeError(`parameter $${position}: ${why}`);
    };
    if (param === null || param === undefined) return { tag: 'null' };
    if (param instanceof SqlParam) return param.value;
    switch (typeof param) {
        case 'boolean':
            return { tag: 'boolean', val: param };
        case 'number':
            return Number.isSafeInteger(param) ? { tag: 'int64', val: BigInt(param) } : { tag: 'float64', val: param };
        case 'bigint':
            return { tag: 'int64', val: int64(param) ?? fail(`${param} does not fit in 64 bits`) };
        case 'string':
            return { tag: 'text', val: param };
        case 'object':
            if (param instanceof Uint8Array) return { tag: 'bytes', val: param };
            if (param instanceof Date) return { tag: 'timestamp', val: rfc3339(param) ?? fail('an invalid Date') };
            if (!isPlain(param)) return fail(`a ${param.constructor?.name ?? "object"} is not a plain object or array: use Db.json(…)`);
            try {
                return { tag: 'json', val: stringify(param) };
            } catch (e) {
                return fail(`not JSON: ${e instanceof Error ? e.message : String(e)}`);
            }
        default:
            return fail(`a ${typeof param} cannot be bound`);
    }
}

/** Arrays and objects made by literals or JSON.parse, whose JSON is what they hold. */
function isPlain(value: object): boolean {
    const proto: unknown = Object.getPrototypeOf(value);
    return Array.isArray(value) || proto === Object.prototype || proto === null;
}

/** `n` when it fits PostgreSQL's `int8`. @internal */
export function int64(n: bigint): bigint | undefined {
    return n >= INT64_MIN && n <= INT64_MAX ? n : undefined;
}

/** `date` as RFC 3339 (UTC, milliseconds), or undefined for an invalid Date. @internal */
export function rfc3339(date: Date): string | undefined {
    return Number.isNaN(date.getTime()) ? undefined : date.toISOString();
}
