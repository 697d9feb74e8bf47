// The database handle, bound to the host's transaction for this event.

import * as wit from 'idem:handler/db@0.1.0';
import { IdemError } from './errors.js';
import { stringify } from './json.js';
import { Rows } from './rows.js';
import { int64, rfc3339, SqlParam, toValue, type Param } from './values.js';

/**
 * A handle on the event's transaction, handed to the handler. Parameters
 * are PostgreSQL's `$1, $2, …`, bound as {@link Param} describes. Every
 * statement runs under a savepoint of its own: one that fails is undone
 * alone, and the handler may go on (after a {@link UniqueViolation} it
 * expected, say). Transaction control is the host's: it commits when the
 * handler returns.
 *
 * @example
 * ```ts
 * db.execute("INSERT INTO billing.charge (event_id, amount) VALUES ($1, $2)", [Db.uuid(event.id), Db.numeric("12.50")]);
 * const row = db.query("SELECT amount FROM billing.charge WHERE event_id = $1", [Db.uuid(event.id)]).first();
 * const amount = row?.string("amount"); // "12.50"
 * ```
 */
export class Db {
    /** @internal The host hands the handler its Db; there is no other. */
    constructor() {}

    /**
     * Runs one statement and returns how many rows it affected.
     *
     * @throws {@link UniqueViolation} on SQLSTATE 23505, {@link DbError} on any other failure.
     */
    execute(sql: string, params: readonly Param[] = []): number {
        // The world's u64 as a number: a count of rows is exact in one (below 2^53).
        return Number(call(() => wit.execute(sql, values(params))));
    }

    /**
     * Runs one statement and returns its rows.
     *
     * @throws {@link UniqueViolation} on SQLSTATE 23505, {@link DbError} on any other failure.
     */
    query(sql: string, params: readonly Param[] = []): Rows {
        return new Rows(call(() => wit.query(sql, values(params))));
    }

    /** A UUID in text form, bound as `uuid` (a string alone binds as `text`). */
    static uuid(text: string): SqlParam {
        return new SqlParam({ tag: 'uuid', val: text });
    }

    /** A decimal, bound as `numeric`: exact, unlike a float. Give it as text (`"10.25"`) to keep every digit. */
    static numeric(decimal: string | number | bigint): SqlParam {
        if (typeof decimal === 'number' && !Number.isFinite(decimal)) throw new TypeError(`${decimal} is not a decimal`);
        return new SqlParam({ tag: 'numeric', val: String(decimal) });
    }

    /** Any JSON-serialisable value (a string, a class instance with `toJSON`), bound as `jsonb`. */
    static json(value: unknown): SqlParam {
        return new SqlParam({ tag: 'json', val: stringify(value) });
    }

    /** An instant, bound as `timestamptz`: a Date, or RFC 3339 text (kept as written, microseconds and all). */
    static timestamp(instant: Date | string): SqlParam {
        const text = typeof instant === 'string' ? instant : rfc3339(instant);
        if (text === undefined) throw new TypeError('an invalid Date');
        return new SqlParam({ tag: 'timestamp', val: text });
    }

    /** A number bound as `float8` even when it is whole (a plain whole number binds as `int8`). */
    static float64(n: number): SqlParam {
        return new SqlParam({ tag: 'float64', val: n });
    }

    /** An integer bound as `int8`. */
    static int64(n: number | bigint): SqlParam {
        const big = typeof n === 'bigint' ? n : Number.isInteger(n) ? BigInt(n) : undefined;
        const val = big === undefined ? undefined : int64(big);
        if (val === undefined) throw new TypeError(`${n} is not a 64-bit integer`);
        return new SqlParam({ tag: 'int64', val });
    }
}

/** The kind of a {@link DbError}: the world's `db-error` case. */
export type DbErrorKind = 'unique-violation' | 'transient' | 'other' | 'refused' | 'invalid-value';

/**
 * A statement failed. Uncaught, it fails the event: retryable when
 * {@link DbError.kind} is `transient` (serialization failure, deadlock,
 * lock or statement timeout), permanent otherwise.
 */
export class DbError extends IdemError {
    /** Which failure: PostgreSQL's (`transient`, `other`, `unique-violation`) or the host's (`refused`, `invalid-value`). */
    readonly kind: DbErrorKind;
    /** The SQLSTATE, for PostgreSQL's failures (e.g. `40001`). */
    readonly code: string | undefined;
    /** The constraint PostgreSQL named, if any. */
    readonly constraint: string | undefined;

    /** @internal */
    constructor(error: wit.DbError) {
        super(`database: ${describe(error)}`, error.tag === 'transient');
        this.kind = error.tag;
        const sql = typeof error.val === 'string' ? undefined : error.val;
        this.code = sql?.code;
        this.constraint = sql?.constraint;
    }
}

/**
 * SQLSTATE 23505: the statement was undone and the transaction goes on, so
 * a handler may catch it (an insert that already happened) and continue.
 */
export class UniqueViolation extends DbError {}

/** A one-line account of `error`, as the Rust SDK words it. */
function describe(error: wit.DbError): string {
    switch (error.tag) {
        case 'unique-violation':
            return `unique violation: ${error.val.message}`;
        case 'transient':
            return `transient error ${error.val.code}: ${error.val.message}`;
        case 'other':
            return `error ${error.val.code}: ${error.val.message}`;
        case 'refused':
            return `statement refused: ${error.val}`;
        case 'invalid-value':
            return `invalid value: ${error.val}`;
    }
}

function values(params: readonly Param[]): wit.Value[] {
    // Our Value is the world's (checked here: a changed WIT fails to compile).
    return params.map((p, i) => toValue(p, i + 1));
}

/** Runs a world call, turning its `db-error` (thrown as `payload`) into a DbError. */
function call<T>(f: () => T): T {
    try {
        return f();
    } catch (e) {
        const payload = (e as { payload?: wit.DbError } | null)?.payload;
        if (payload === undefined) throw e;
        throw payload.tag === 'unique-violation' ? new UniqueViolation(payload) : new DbError(payload);
    }
}
