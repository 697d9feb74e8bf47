// JSON text for request bodies, emitted events and `json` parameters.

/** The integers idem's host reads exactly from JSON: int64 and uint64. */
const MIN_EXACT = -(2n ** 63n);
const MAX_EXACT = 2n ** 64n - 1n;

/**
 * `JSON.stringify`, except that a `bigint` (an `int8` column read back, an
 * id beyond 2^53 read from a payload) is written as the JSON integer it is,
 * every digit exact, instead of a TypeError; `parse` reads it back as the
 * same `bigint`. One outside int64 and uint64 is a TypeError naming it:
 * the host would read it as a double, rounded.
 *
 * @internal
 */
export function stringify(value: unknown): string {
    // A bigint goes in as a string that no other string of `value` can be
    // (a mark carrying a fresh nonce), which is then replaced by its digits.
    const mark = `\u0000idem-bigint-${Math.random().toString(36).slice(2)}:`;
    let bigints = 0;
    const text = JSON.stringify(value, (_key, v: unknown) => {
        if (typeof v !== 'bigint') return v;
        if (v < MIN_EXACT || v > MAX_EXACT) {
            throw new TypeError(`${v} is beyond 64 bits: the host would round it; convert it to a string first`);
        }
        bigints += 1;
        return `${mark}${v}`;
    });
    // JSON.stringify answers `undefined` (not a string) for undefined, functions and symbols.
    if (text === undefined) throw new TypeError(`${typeof value} is not JSON`);
    if (bigints === 0) return text;
    const quoted = JSON.stringify(mark).slice(0, -1); // `"\u0000idem-bigint-…:` as it appears in `text`
    const parts = text.split(quoted);
    // A string of `value` that happened to hold the mark would be taken for a bigint: refuse rather than guess.
    if (parts.length !== bigints + 1) throw new TypeError('a string holds the mark bigints are written with; serialise it yourself');
    return parts.map((part, i) => (i === 0 ? part : part.replace(/^(-?\d+)"/, '$1'))).join('');
}

/** What {@link parse} does with an integer outside ±(2^53 − 1). */
export type BigIntegers = 'bigint' | 'refuse';

/**
 * `JSON.parse`, except that an integer outside JavaScript's safe range
 * (±(2^53 − 1): an order id, an amount in minor units, a 64-bit key) is
 * never rounded: it becomes a `bigint`, or with `'refuse'` the parse
 * throws a TypeError naming it. Other numbers are doubles, as in
 * `JSON.parse`. Text without such an integer takes `JSON.parse` itself.
 *
 * @internal
 */
export function parse(text: string, big: BigIntegers = 'bigint'): unknown {
    const value: unknown = JSON.parse(text);
    // An integer beyond ±(2^53 − 1) parses to a double beyond it too (2^53
    // is a double), so a value holding no such double was read exactly: one
    // JSON.parse and a walk, where the scan of the text below costs several
    // times that in the component's interpreter.
    if (!beyondSafe(value)) return value;
    const found = firstBigInteger(text);
    if (found === undefined) return value;
    if (big === 'refuse') {
        throw new TypeError(
            `the integer ${found} is outside JavaScript's safe range (±(2^53 − 1)) and would be rounded; ` +
                `read it as a bigint (payloadAs without bigIntegers: 'refuse'), or send it as a string`,
        );
    }
    return new Reader(text).document();
}

const SAFE_NUMBER = Number.MAX_SAFE_INTEGER;

/** Whether `value` holds a number beyond ±(2^53 − 1) (an exponent's or a big integer's). */
function beyondSafe(value: unknown): boolean {
    if (typeof value === 'number') return value > SAFE_NUMBER || value < -SAFE_NUMBER;
    if (typeof value !== 'object' || value === null) return false;
    if (Array.isArray(value)) return value.some(beyondSafe);
    for (const key of Object.keys(value)) {
        if (beyondSafe((value as Record<string, unknown>)[key])) return true;
    }
    return false;
}

const SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** The first integer token (outside strings) beyond the safe range. */
function firstBigInteger(text: string): string | undefined {
    const token = /"(?:[^"\\]|\\.)*"|-?\d{16,}(?![.eE\d])/g;
    for (let m = token.exec(text); m !== null; m = token.exec(text)) {
        const t = m[0];
        if (t.charCodeAt(0) === 34 /* " */) continue;
        // A digit run inside a longer number (`1.2345678901234567`) is not an integer.
        const before = text.charAt(m.index - 1);
        if (before === '.' || before === 'e' || before === 'E' || before === '+' || (before >= '0' && before <= '9')) continue;
        const n = BigInt(t);
        if (n > SAFE || n < -SAFE) return t;
    }
    return undefined;
}

/** A small JSON reader for text already known to be JSON. */
class Reader {
    #at = 0;
    readonly #text: string;

    constructor(text: string) {
        this.#text = text;
    }

    private at(): string {
        return this.#text.charAt(this.#at);
    }

    document(): unknown {
        const value = this.value();
        this.space();
        return value;
    }

    private space(): void {
        while (this.#at < this.#text.length && ' \t\n\r'.includes(this.at())) this.#at++;
    }

    private value(): unknown {
        this.space();
        const c = this.at();
        if (c === '{') return this.object();
        if (c === '[') return this.array();
        if (c === '"') return this.string();
        if (c === 't') return this.word('true', true);
        if (c === 'f') return this.word('false', false);
        if (c === 'n') return this.word('null', null);
        return this.number();
    }

    private object(): Record<string, unknown> {
        const out: Record<string, unknown> = {};
        this.#at++;
        this.space();
        if (this.at() === '}') {
            this.#at++;
            return out;
        }
        for (;;) {
            this.space();
            const key = this.string();
            this.space();
            this.#at++; // ':'
            const value = this.value();
            // As JSON.parse: `__proto__` is an own property, not the prototype.
            Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
            this.space();
            if (this.#text.charAt(this.#at++) === '}') return out;
        }
    }

    private array(): unknown[] {
        const out: unknown[] = [];
        this.#at++;
        this.space();
        if (this.at() === ']') {
            this.#at++;
            return out;
        }
        for (;;) {
            out.push(this.value());
            this.space();
            if (this.#text.charAt(this.#at++) === ']') return out;
        }
    }

    private string(): string {
        const start = this.#at;
        this.#at++;
        while (this.at() !== '"') this.#at += this.at() === '\\' ? 2 : 1;
        this.#at++;
        return JSON.parse(this.#text.slice(start, this.#at)) as string;
    }

    private word<T>(word: string, value: T): T {
        this.#at += word.length;
        return value;
    }

    private number(): number | bigint {
        const start = this.#at;
        while (this.#at < this.#text.length && '+-0123456789.eE'.includes(this.at())) this.#at++;
        const token = this.#text.slice(start, this.#at);
        if (/^-?\d+$/.test(token)) {
            const n = BigInt(token);
            if (n > SAFE || n < -SAFE) return n;
        }
        return Number(token);
    }
}
