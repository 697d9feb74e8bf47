// The host as the tests script it: the world's functions (mocks/<name>.mjs)
// call these, which record every call. A test replaces what it needs and
// calls reset() first; a world error is thrown as componentize-js throws
// it, an Error whose `payload` is the error variant.

export class WorldError extends Error {
    constructor(payload) {
        super(`${String(payload)} (see error.payload)`);
        Object.defineProperty(this, 'payload', { value: payload, enumerable: true });
    }
}

export const host = {
    reset() {
        this.calls = [];
        this.logs = [];
        this.config = {};
        this.execute = () => 1n;
        this.query = () => ({ columns: [], rows: [] });
        this.http = () => ({ status: 200, headers: [], body: new Uint8Array() });
        this.emit = () => '0190f0f0-0000-7000-8000-000000000001';
        this.origin = undefined;
    },
    record(name, ...args) {
        this.calls.push([name, ...args]);
    },
};
host.reset();
