// The quick test's runner: one component per SDK version that runs a
// project's handler as `idem test --sources FILE` hands it over, so that an
// edit is tested without building a component (`./test.sh --quick`).
//
// componentize-js builds the real component by running the bundle inside
// SpiderMonkey and snapshotting it: that is what takes seconds. This runner
// is built the same way once, with the SDK and nothing of the project; the
// project arrives as the handler's config value `idem.test.sources` (a JSON
// object of file name -> text, set by `idem test` only): `handler.js`, the
// project bundled as CommonJS with `@idem/handler` left to `require`. It is
// evaluated at the first event with a `require` that answers this SDK, so
// the handler runs exactly as in its component — same engine, same SDK, same
// host calls — except that its module runs at its first event rather than
// at build time. `./build.sh` still builds the component that is deployed.
//
// Imported by the runner's entry module only (tools/build.mjs --runner),
// never by handlers: the entry imports ./component.js first.

import type { Event as WitEvent } from 'idem:handler/types@0.1.0';
import * as wit from 'idem:handler/config@0.1.0';
import * as sdk from './index.js';
import { classify, Permanent } from './errors.js';
import { assertRegistered, handle as run, type Outcome } from './runtime.js';

/** The config key the project's bundle arrives under. */
const SOURCES = 'idem.test.sources';
/** The bundle's file name in it. */
const BUNDLE = 'handler.js';

/** The first event's verdict on the project: loaded, or why not. */
let loaded: true | { failure: Permanent } | undefined;

/** Evaluates the project's bundle once, which registers its handler. */
function load(): void {
    const given = wit.get(SOURCES);
    if (given === undefined) {
        throw new Permanent('the quick runner needs the project: run it with `idem test --sources .idem/quick/handler.js`');
    }
    const code = (JSON.parse(given) as Record<string, string>)[BUNDLE];
    if (code === undefined) throw new Permanent(`the quick runner was handed no ${BUNDLE}`);
    const module = { exports: {} as unknown };
    const require = (name: string): unknown => {
        if (name === '@idem/handler') return sdk;
        throw new Permanent(
            `the handler imports \`${name}\`: the quick runner has @idem/handler and the project's own modules only ` +
                '(test a handler that imports the world directly with ./test.sh)',
        );
    };
    // The sourceURL names the bundle in the stack a failure reports.
    new Function('require', 'module', 'exports', `${code}\n//# sourceURL=${BUNDLE}`)(require, module, module.exports);
    assertRegistered();
}

/** The world's export: the project's handler, once its bundle has run. */
export function handle(raw: WitEvent): Outcome {
    if (loaded === undefined) {
        try {
            load();
            loaded = true;
        } catch (e) {
            // A syntax error, a throw at the top level: every event fails
            // permanently with it, as a bug does (the component would not
            // have been built at all), whatever the throw's class.
            const { val } = classify(e);
            loaded = { failure: new Permanent(`the handler's module failed to load: ${val}`) };
        }
    }
    if (loaded !== true) return { tag: 'err', val: classify(loaded.failure) };
    return run(raw);
}
