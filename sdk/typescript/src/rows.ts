// The rows a query returned, and their columns as JavaScript values.

import type { Rows as WitRows } from 'idem:handler/db@0.1.0';
import { Permanent } from './errors.js';
import type { Value } from './values.js';

/**
 * A column's value as {@link Row.get} returns it: `null` for NULL,
 * `boolean`, `bigint` for the integer types (PostgreSQL's `int8` does not
 * fit a number), `number` for the float types, `Uint8Array` for `bytea`,
 * the parsed value for `json`/`jsonb`, and `string` for everything the
 * host hands over as text: `text`, `uuid`, `numeric` (exact, e.g. `"12.50"`),
 * `timestamptz` (RFC 3339), `date`, `time`, `timestamp`.
 */
export type SqlValue = JsonValue | bigint | Uint8Array;

/** A value JSON text parses to. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** The rows a query returned; iterate them, or take {@link Rows.first}. */
export class Rows implements Iterable<Row> {
    /** Column names, in order; empty when no row came back. */
    readonly columns: readonly string[];
    readonly #rows: readonly (readonly Value[])[];

    /** @internal */
    constructor(raw: WitRows) {
        this.columns = raw.columns;
        this.#rows = raw.rows;
    }

    /** How many rows came back. */
    get length(): number {
        return this.#rows.length;
    }

    /** The first row, or undefined when none came back. */
    first(): Row | undefined {
        return this.at(0);
    }

    /** Row `index` (negative counts from the end), or undefined. */
    at(index: number): Row | undefined {
        const values = this.#rows.at(index);
        return values && new Row(this.columns, values);
    }

    /** The rows, in order. */
    *[Symbol.iterator](): Iterator<Row> {
        for (const values of this.#rows) yield new Row(this.columns, values);
    }

    /** Every row as a plain object of {@link Row.get} values, keyed by column name. */
    objects(): Record<string, SqlValue>[] {
        return [...this].map((row) => Object.fromEntries(this.columns.map((c) => [c, row.get(c)])));
    }
}

/**
 * One row. Read a column by name with {@link Row.get} (any type), or with a
 * typed reader, which throws {@link Permanent} naming the column when it is
 * missing, NULL, or of another type (retrying would not change the schema).
 */
export class Row {
    /** @internal */
    constructor(
        /** The result's column names, in order. */
        readonly columns: readonly string[],
        /** This row's values, in column order. */
        readonly values: readonly Value[],
    ) {}

    /** The world's value of column `name`, as the host sent it. */
    raw(name: string): Value {
        const index = this.columns.indexOf(name);
        const value = this.values[index];
        if (index < 0 || value === undefined) throw new Permanent(`no column \`${name}\` in the result`);
        return value;
    }

    /** Whether column `name` is NULL. */
    isNull(name: string): boolean {
        return this.raw(name).tag === 'null';
    }

    /** Column `name` as its natural JavaScript value (see {@link SqlValue}). */
    get(name: string): SqlValue {
        const value = this.raw(name);
        switch (value.tag) {
            case 'null':
                return null;
            case 'json':
                return JSON.parse(value.val) as JsonValue;
            default:
                return value.val;
        }
    }

    /** Text, and every type the host sends as text (uuid, numeric, timestamptz, json). */
    string(name: string): string {
        return this.#read(name, 'text', textOf);
    }

    /** A number: float columns, integers that fit exactly, numeric as `Number` (may round). */
    number(name: string): number {
        return this.#read(name, 'a number', (v) => {
            if (v.tag === 'float64') return v.val;
            if (v.tag === 'int64' && Number.isSafeInteger(Number(v.val))) return Number(v.val);
            return v.tag === 'numeric' ? Number(v.val) : undefined;
        });
    }

    /** An integer column, exactly. */
    bigint(name: string): bigint {
        return this.#read(name, 'an integer', (v) => (v.tag === 'int64' ? v.val : undefined));
    }

    /** A `bool` column. */
    boolean(name: string): boolean {
        return this.#read(name, 'a boolean', (v) => (v.tag === 'boolean' ? v.val : undefined));
    }

    /** A `bytea` column. */
    bytes(name: string): Uint8Array {
        return this.#read(name, 'bytes', (v) => (v.tag === 'bytes' ? v.val : undefined));
    }

    /** A `timestamptz` column (millisecond precision: JavaScript's). */
    date(name: string): Date {
        return this.#read(name, 'a timestamp', (v) => (v.tag === 'timestamp' ? new Date(v.val) : undefined));
    }

    /** A `json`/`jsonb` column, parsed; `T` is not checked. */
    json<T = unknown>(name: string): T {
        return this.#read(name, 'json', (v) => (v.tag === 'json' ? (JSON.parse(v.val) as T) : undefined));
    }

    #read<T>(name: string, want: string, convert: (value: Value) => T | undefined): T {
        const value = this.raw(name);
        const got = convert(value);
        if (got === undefined) {
            const shown = value.tag === 'null' ? 'NULL' : `${value.tag} ${String(value.val).slice(0, 40)}`;
            throw new Permanent(`column \`${name}\`: expected ${want}, got ${shown}`);
        }
        return got;
    }
}

/** The text of the variants the host sends as text. */
function textOf(value: Value): string | undefined {
    switch (value.tag) {
        case 'text':
        case 'uuid':
        case 'numeric':
        case 'timestamp':
        case 'json':
            return value.val;
        default:
            return undefined;
    }
}
