// Module resolution for the tests (registered by register.mjs):
// `@idem/handler` and `@idem/handler/<module>.js` are the SDK build under
// test (IDEM_SDK_DIST, compiled by scripts/sdk/check-ts), the world's
// interfaces `idem:handler/<name>[@0.1.0]` are the scripted host in mocks/,
// and the WASI shims a transpiled component imports are jco's.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

let dist;
let jco;

export function initialize(data) {
    dist = data.dist;
    jco = pathToFileURL(createRequire(import.meta.url).resolve('@bytecodealliance/jco')).href;
}

export async function resolve(specifier, context, next) {
    if (specifier === '@idem/handler') return { url: pathToFileURL(join(dist, 'index.js')).href, shortCircuit: true };
    const internal = /^@idem\/handler\/(\w+\.js)$/.exec(specifier);
    if (internal) return { url: pathToFileURL(join(dist, internal[1])).href, shortCircuit: true };
    // jco's transpiled output names them without the version.
    const world = /^idem:handler\/([a-z]+)(@0\.1\.0)?$/.exec(specifier);
    if (world) return { url: new URL(`./mocks/${world[1]}.mjs`, import.meta.url).href, shortCircuit: true };
    if (specifier.startsWith('@bytecodealliance/preview2-shim')) return next(specifier, { ...context, parentURL: jco });
    return next(specifier, context);
}
