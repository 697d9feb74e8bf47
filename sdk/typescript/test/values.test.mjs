// JavaScript parameters to the world's `value`, and columns back.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { Db, Permanent, Rows } from '@idem/handler';
import { host } from './mocks/host.mjs';

/** The world values `params` bind as, through Db.execute. */
function bound(...params) {
    host.reset();
    new Db().execute('SELECT 1', params);
    return host.calls[0][2];
}

beforeEach(() => host.reset());

test('each JavaScript type binds as its natural variant', () => {
    const bytes = new Uint8Array([1, 2]);
    assert.deepEqual(bound(null, undefined, true, 5, -0, 2.5, 12n, 'x', bytes), [
        { tag: 'null' },
        { tag: 'null' },
        { tag: 'boolean', val: true },
        { tag: 'int64', val: 5n },
        { tag: 'int64', val: 0n },
        { tag: 'float64', val: 2.5 },
        { tag: 'int64', val: 12n },
        { tag: 'text', val: 'x' },
        { tag: 'bytes', val: bytes },
    ]);
});

test('numbers: only safe integers are int64', () => {
    assert.deepEqual(bound(2 ** 53, NaN, Infinity, Number.MAX_SAFE_INTEGER), [
        { tag: 'float64', val: 2 ** 53 },
        { tag: 'float64', val: NaN },
        { tag: 'float64', val: Infinity },
        { tag: 'int64', val: BigInt(Number.MAX_SAFE_INTEGER) },
    ]);
});

test('Date is an RFC 3339 timestamp; objects and arrays are JSON, bigints as numbers', () => {
    assert.deepEqual(bound(new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6)), { a: [1, 'b'], n: 7n }, [null, true]), [
        { tag: 'timestamp', val: '2026-01-02T03:04:05.006Z' },
        { tag: 'json', val: '{"a":[1,"b"],"n":7}' },
        { tag: 'json', val: '[null,true]' },
    ]);
});

test('the explicit wrappers', () => {
    assert.deepEqual(
        bound(
            Db.uuid('0190f0f0-0000-7000-8000-000000000001'),
            Db.numeric('10.25'),
            Db.numeric(3),
            Db.numeric(12345678901234567890n),
            Db.json('text as JSON'),
            Db.timestamp('2026-01-02T03:04:05.123456+01:00'),
            Db.timestamp(new Date(0)),
            Db.float64(10),
            Db.int64(7),
            Db.int64(-(2n ** 63n)),
        ),
        [
            { tag: 'uuid', val: '0190f0f0-0000-7000-8000-000000000001' },
            { tag: 'numeric', val: '10.25' },
            { tag: 'numeric', val: '3' },
            { tag: 'numeric', val: '12345678901234567890' },
            { tag: 'json', val: '"text as JSON"' },
            { tag: 'timestamp', val: '2026-01-02T03:04:05.123456+01:00' },
            { tag: 'timestamp', val: '1970-01-01T00:00:00.000Z' },
            { tag: 'float64', val: 10 },
            { tag: 'int64', val: 7n },
            { tag: 'int64', val: -(2n ** 63n) },
        ],
    );
});

test('what cannot be bound is a TypeError naming the parameter', () => {
    const cases = [
        [[2n ** 63n], /parameter \$1: 9223372036854775808 does not fit in 64 bits/],
        [[1, new Date(NaN)], /parameter \$2: an invalid Date/],
        [['a', 'b', () => 1], /parameter \$3: a function cannot be bound/],
        [[Symbol('s')], /parameter \$1: a symbol cannot be bound/],
        [[new Map()], /parameter \$1: a Map is not a plain object or array/],
    ];
    for (const [params, message] of cases) {
        assert.throws(() => new Db().execute('SELECT 1', params), { name: 'TypeError', message });
    }
    assert.throws(() => Db.int64(1.5), TypeError);
    assert.throws(() => Db.int64(2n ** 63n), TypeError);
    assert.throws(() => Db.numeric(NaN), TypeError);
    assert.throws(() => Db.timestamp(new Date(NaN)), TypeError);
    assert.equal(host.calls.length, 0, 'nothing reaches the host');
});

test('a bigint inside a jsonb parameter is written as its exact integer', () => {
    host.execute = () => 1n;
    new Db().execute('INSERT INTO t (doc) VALUES ($1)', [{ n: 2n ** 60n + 1n }]);
    assert.deepEqual(host.calls.at(-1)[2], [{ tag: 'json', val: '{"n":1152921504606846977}' }]);
});

test('execute answers the affected rows as a number; params default to none', () => {
    host.execute = () => 3n;
    assert.equal(new Db().execute('DELETE FROM t'), 3);
    assert.deepEqual(host.calls, [['db.execute', 'DELETE FROM t', []]]);
});

const ROWS = new Rows({
    columns: ['n', 'f', 't', 'u', 'm', 'ts', 'j', 'b', 'bin', 'z'],
    rows: [
        [
            { tag: 'int64', val: 42n },
            { tag: 'float64', val: 1.5 },
            { tag: 'text', val: 'hi' },
            { tag: 'uuid', val: '0190f0f0-0000-7000-8000-000000000001' },
            { tag: 'numeric', val: '12.50' },
            { tag: 'timestamp', val: '2026-01-02T03:04:05.000006Z' },
            { tag: 'json', val: '{"a":[1]}' },
            { tag: 'boolean', val: false },
            { tag: 'bytes', val: new Uint8Array([9]) },
            { tag: 'null' },
        ],
        [{ tag: 'int64', val: 2n ** 60n }, ...Array(9).fill({ tag: 'null' })],
    ],
});

test('columns come back by name: get() and the typed readers', () => {
    assert.equal(ROWS.length, 2);
    const row = ROWS.first();
    assert.deepEqual(
        ROWS.columns.map((c) => row.get(c)),
        [42n, 1.5, 'hi', '0190f0f0-0000-7000-8000-000000000001', '12.50', '2026-01-02T03:04:05.000006Z', { a: [1] }, false, new Uint8Array([9]), null],
    );
    assert.equal(row.number('n'), 42);
    assert.equal(row.bigint('n'), 42n);
    assert.equal(row.number('f'), 1.5);
    assert.equal(row.number('m'), 12.5);
    assert.equal(row.string('m'), '12.50');
    assert.equal(row.string('u'), '0190f0f0-0000-7000-8000-000000000001');
    assert.equal(row.string('j'), '{"a":[1]}');
    assert.deepEqual(row.json('j'), { a: [1] });
    assert.equal(row.date('ts').toISOString(), '2026-01-02T03:04:05.000Z');
    assert.equal(row.boolean('b'), false);
    assert.deepEqual(row.bytes('bin'), new Uint8Array([9]));
    assert.equal(row.isNull('z'), true);
    assert.deepEqual(row.raw('t'), { tag: 'text', val: 'hi' });
    assert.deepEqual([...ROWS].map((r) => r.get('n')), [42n, 2n ** 60n]);
    assert.equal(ROWS.objects()[1].n, 2n ** 60n);
    assert.equal(ROWS.at(-1).get('t'), null);
    assert.equal(new Rows({ columns: [], rows: [] }).first(), undefined);
});

test('a missing column, a NULL or another type is Permanent, naming the column', () => {
    const row = ROWS.first();
    assert.throws(() => row.get('nope'), { constructor: Permanent, message: 'no column `nope` in the result' });
    assert.throws(() => row.string('z'), { constructor: Permanent, message: 'column `z`: expected text, got NULL' });
    assert.throws(() => row.bigint('t'), { constructor: Permanent, message: 'column `t`: expected an integer, got text hi' });
    assert.throws(() => ROWS.at(1).number('n'), /column `n`: expected a number, got int64 1152921504606846976/);
});
