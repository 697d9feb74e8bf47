// A TypeScript handler, built with the SDK, that tries to reach what the
// sandbox must hide: the host's files, its network and its environment. It
// records each attempt instead of failing, so that a test can read what it
// found.
//
// StarlingMonkey (componentize-js's engine) has no file, socket or
// environment API of its own: no `require`, `process`, `Deno` or `Bun`
// (`File` and `Blob` are in-memory only), and its `fetch` would trap
// without wasi:http, so the SDK replaces it with one that throws. The
// probes look for each API anyway, so that an engine that grows one is
// noticed.
//
// In order: read /etc/passwd, fetch http://127.0.0.1:5432/, open a TCP
// socket to 127.0.0.1:5432, GET http://127.0.0.1:5432/ through the host's
// http (outside any allowlist), read the environment. Each attempt is one
// row of notification.sent with message `<probe>: <outcome>`, where outcome
// is the error's name and message, or what was read, cut at 200
// characters; customer_id is the probe's number (1 to 5, in that order) and
// event_id the event's id with its last hex digit XOR'd by that number
// (event_id is the table's primary key). Then it returns normally.
//
// Build: scripts/sdk/build-ts tests/guests/ts-probe OUT.wasm
import { Db, handler, http } from '@idem/handler';

/** The engine's globals, looked up by name: none of these is declared for handlers. */
const global = globalThis as Record<string, any>;

function readPasswd(): string {
    if (typeof global.require === 'function') return String(global.require('fs').readFileSync('/etc/passwd', 'utf8'));
    if (global.Deno?.readTextFileSync) return String(global.Deno.readTextFileSync('/etc/passwd'));
    throw new Error(`no file API (require: ${typeof global.require}, Deno: ${typeof global.Deno}, Bun: ${typeof global.Bun})`);
}

function fetchPostgres(): string {
    return `fetch returned ${String(global.fetch('http://127.0.0.1:5432/'))}`;
}

function tcpConnect(): string {
    if (global.Deno?.connect) return `connected: ${String(global.Deno.connect({ hostname: '127.0.0.1', port: 5432 }))}`;
    if (typeof global.TCPSocket === 'function') return `connected: ${String(new global.TCPSocket('127.0.0.1', 5432))}`;
    throw new Error(`no socket API (Deno: ${typeof global.Deno}, TCPSocket: ${typeof global.TCPSocket}, navigator: ${typeof global.navigator})`);
}

function hostHttp(): string {
    return `HTTP ${http.get('http://127.0.0.1:5432/').send().status}`;
}

function readEnvironment(): string {
    if (global.process?.env) return JSON.stringify(global.process.env);
    throw new Error(`no environment API (process: ${typeof global.process}, Deno: ${typeof global.Deno})`);
}

const PROBES: [string, () => string][] = [
    ['read /etc/passwd', readPasswd],
    ['fetch http://127.0.0.1:5432/', fetchPostgres],
    ['tcp 127.0.0.1:5432', tcpConnect],
    ['http.get http://127.0.0.1:5432/', hostHttp],
    ['environment', readEnvironment],
];

/** The outcome of `attempt`: what it got, or the error's name and message. */
function outcome(attempt: () => string): string {
    try {
        return attempt();
    } catch (e) {
        return e instanceof Error ? `${e.name}: ${e.message}` : `thrown: ${String(e)}`;
    }
}

handler((event, db) => {
    PROBES.forEach(([probe, attempt], i) => {
        const number = i + 1;
        const id = event.id.slice(0, -1) + (parseInt(event.id.slice(-1), 16) ^ number).toString(16);
        db.execute('INSERT INTO notification.sent (event_id, customer_id, message) VALUES ($1, $2, $3)', [
            Db.uuid(id),
            number,
            `${probe}: ${outcome(attempt).slice(0, 200)}`,
        ]);
    });
});
