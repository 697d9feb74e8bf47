// Each world error becomes an SDK error that knows whether to retry, worded as the Rust SDK words it.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { Db, DbError, EmitError, emit, http, HttpError, IdemError, Permanent, Retryable, UniqueViolation } from '@idem/handler';
import { host, WorldError } from './mocks/host.mjs';

beforeEach(() => host.reset());

const sql = (code, message, constraint) => ({ code, message, constraint });

test('database errors: transient is retryable, the rest permanent', () => {
    const cases = [
        [{ tag: 'unique-violation', val: sql('23505', 'duplicate key', 'charge_pkey') }, UniqueViolation, false, 'database: unique violation: duplicate key'],
        [{ tag: 'transient', val: sql('40001', 'could not serialize') }, DbError, true, 'database: transient error 40001: could not serialize'],
        [{ tag: 'other', val: sql('42P01', 'no such table') }, DbError, false, 'database: error 42P01: no such table'],
        [{ tag: 'refused', val: 'transaction control' }, DbError, false, 'database: statement refused: transaction control'],
        [{ tag: 'invalid-value', val: 'not a UUID' }, DbError, false, 'database: invalid value: not a UUID'],
    ];
    for (const [payload, type, retryable, message] of cases) {
        host.execute = () => {
            throw new WorldError(payload);
        };
        host.query = host.execute;
        for (const run of [() => new Db().execute('x'), () => new Db().query('x')]) {
            assert.throws(run, (e) => {
                assert.equal(e.constructor, type);
                assert.ok(e instanceof DbError && e instanceof IdemError);
                assert.equal(e.retryable, retryable);
                assert.equal(e.message, message);
                assert.equal(e.kind, payload.tag);
                assert.equal(e.code, typeof payload.val === 'string' ? undefined : payload.val.code);
                return true;
            });
        }
    }
});

test('a unique violation carries its constraint, and the handler may go on', () => {
    let first = true;
    host.execute = () => {
        if (!first) return 1n;
        first = false;
        throw new WorldError({ tag: 'unique-violation', val: sql('23505', 'dup', 'charge_pkey') });
    };
    const db = new Db();
    try {
        db.execute('INSERT …');
    } catch (e) {
        assert.ok(e instanceof UniqueViolation);
        assert.equal(e.constraint, 'charge_pkey');
    }
    assert.equal(db.execute('UPDATE …'), 1);
});

test('an error without a world payload passes through untouched', () => {
    const bug = new RangeError('boom');
    host.execute = () => {
        throw bug;
    };
    assert.throws(() => new Db().execute('x'), (e) => e === bug);
});

test('http errors: timeout and connection are retryable, denied and invalid permanent', () => {
    const cases = [
        ['timeout', true, 'http: timeout: after 5000 ms'],
        ['connection', true, 'http: connection: after 5000 ms'],
        ['denied', false, 'http: denied: after 5000 ms'],
        ['invalid-request', false, 'http: invalid request: after 5000 ms'],
    ];
    for (const [tag, retryable, message] of cases) {
        host.http = () => {
            throw new WorldError({ tag, val: 'after 5000 ms' });
        };
        assert.throws(() => http.post('http://x/').send(), { constructor: HttpError, kind: tag, retryable, message });
    }
});

test('emit errors are permanent', () => {
    for (const tag of ['refused', 'invalid']) {
        host.emit = () => {
            throw new WorldError({ tag, val: 'topic `t` is not configured' });
        };
        assert.throws(() => emit.event('t', 'x.v1').send(), {
            constructor: EmitError,
            kind: tag,
            retryable: false,
            message: `emit ${tag}: topic \`t\` is not configured`,
        });
    }
});

test('Retryable and Permanent', () => {
    const r = new Retryable('no stock yet');
    const p = new Permanent('bad order');
    assert.deepEqual([r.retryable, r.name, r.message, r instanceof IdemError], [true, 'Retryable', 'no stock yet', true]);
    assert.deepEqual([p.retryable, p.name, p.message, p instanceof Error], [false, 'Permanent', 'bad order', true]);
});
