// JSON text for request bodies, emitted events and `json` parameters.

/**
 * `JSON.stringify`, except that a `bigint` (an `int8` column read back, an
 * id too large for a number) becomes a JSON number instead of a TypeError,
 * when a `number` holds it exactly. A larger one is a TypeError naming it:
 * silently rounding an id would be worse.
 *
 * @internal
 */
export function stringify(value: unknown): string {
    const text = JSON.stringify(value, (_key, v: unknown) => {
        if (typeof v !== 'bigint') return v;
        if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < BigInt(Number.MIN_SAFE_INTEGER)) {
            throw new TypeError(`${v} does not fit a JSON number exactly; convert it to a string first`);
        }
        return Number(v);
    });
    // JSON.stringify answers `undefined` (not a string) for undefined, functions and symbols.
    if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
    return text;
}
