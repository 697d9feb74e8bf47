// Imported first by the component's entry module (scripts/sdk/build-ts
// writes it), never by handlers or tests: it changes the engine's globals.

// StarlingMonkey defines `fetch` whatever the component imports. Without
// wasi:http (which idem refuses), its wasi:http calls are stubs that trap:
// a handler calling fetch() would kill the instance with "unreachable"
// instead of seeing an error. Replace it with one that throws, saying what
// to use instead.
Object.defineProperty(globalThis, 'fetch', {
    configurable: true,
    writable: true,
    value: function fetch(): never {
        throw new TypeError(
            "fetch() is not available in idem handlers (the component has no wasi:http); use the SDK's http.post(url)…send()",
        );
    },
});

export { assertRegistered, handle } from './runtime.js';
