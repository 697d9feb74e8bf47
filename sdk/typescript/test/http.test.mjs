// Requests as the host receives them, and responses.
import assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';

import { http, HttpError, HttpStatusError, Permanent } from '@idem/handler';
import { host } from './mocks/host.mjs';

const text = (bytes) => new TextDecoder().decode(bytes);
const response = (status, body = '', headers = []) => () => ({ status, headers, body: new TextEncoder().encode(body) });

beforeEach(() => host.reset());

test('the builder: method, url, headers, JSON body, label; never an Idempotency-Key', () => {
    http.post('https://pay.example/v1/charges').header('x-trace', '1').label('fee').json({ amount: 10.25, id: 7n }).send();
    const [[name, request]] = host.calls;
    assert.equal(name, 'http.send');
    assert.equal(request.method, 'POST');
    assert.equal(request.url, 'https://pay.example/v1/charges');
    assert.equal(request.label, 'fee');
    assert.deepEqual(request.headers, [['x-trace', '1'], ['content-type', 'application/json']]);
    assert.equal(text(request.body), '{"amount":10.25,"id":7}');
    assert.ok(!request.headers.some(([n]) => n.toLowerCase() === 'idempotency-key'));
});

test('every method; no body and no label unless given', () => {
    for (const [make, method] of [[http.get, 'GET'], [http.post, 'POST'], [http.put, 'PUT'], [http.patch, 'PATCH'], [http.delete, 'DELETE']]) {
        make('http://x/').send();
        assert.equal(host.calls.at(-1)[1].method, method);
    }
    http.request('OPTIONS', 'http://x/').body('raw text').send();
    const request = host.calls.at(-1)[1];
    assert.deepEqual([request.method, text(request.body), request.label, request.headers], ['OPTIONS', 'raw text', undefined, []]);
    assert.equal(host.calls[0][1].body, undefined);
});

test('a body that is not JSON is an invalid request, nothing sent', () => {
    const cycle = {};
    cycle.self = cycle;
    assert.throws(() => http.post('http://x/').json(cycle), { constructor: HttpError, kind: 'invalid-request', retryable: false });
    assert.throws(() => http.post('http://x/').json({ n: 2n ** 64n }), /beyond 64 bits/);
    assert.equal(host.calls.length, 0);
});

test('a bigint body is written as its exact integer, a string that looks like one stays a string', () => {
    http.post('http://x/').json({ id: 2n ** 63n - 1n, n: -(2n ** 53n) - 1n, s: '\u0000idem-bigint-x:5', a: [1n, 2.5] }).send();
    assert.equal(
        text(host.calls.at(-1)[1].body),
        '{"id":9223372036854775807,"n":-9007199254740993,"s":"\\u0000idem-bigint-x:5","a":[1,2.5]}',
    );
});

test('a response: status, headers, text, json', () => {
    host.http = response(201, '{"id":"ch_1"}', [['Content-Type', 'application/json']]);
    const r = http.post('http://x/').send();
    assert.deepEqual([r.status, r.ok, r.header('content-type'), r.header('x-none'), r.text()], [201, true, 'application/json', undefined, '{"id":"ch_1"}']);
    assert.deepEqual(r.json(), { id: 'ch_1' });
    assert.equal(r.raiseForStatus(), r);
    host.http = response(200, 'not json');
    assert.throws(() => http.get('http://x/').send().json(), { constructor: Permanent, message: /^response body is not the expected JSON: / });
    host.http = () => ({ status: 200, headers: [], body: new Uint8Array([0x68, 0xff, 0x69]) });
    assert.equal(http.get('http://x/').send().text(), 'h\uFFFDi');
});

test('raiseForStatus: 408, 425, 429 and 5xx retryable, other non-2xx permanent', () => {
    const retryable = [408, 425, 429, 500, 502, 503, 599];
    const permanent = [300, 301, 400, 401, 403, 404, 409, 422];
    for (const status of [...retryable, ...permanent]) {
        host.http = response(status, 'provider says no');
        assert.throws(() => http.post('http://x/').send().raiseForStatus(), (e) => {
            assert.ok(e instanceof HttpStatusError);
            assert.equal(e.status, status);
            assert.equal(e.response.status, status);
            assert.equal(e.retryable, retryable.includes(status), String(status));
            assert.equal(e.message, `HTTP ${status}: provider says no`);
            return true;
        });
    }
    host.http = response(500, 'é'.repeat(300));
    assert.throws(() => http.get('http://x/').send().raiseForStatus(), { message: `HTTP 500: ${'é'.repeat(200)}` });
});
