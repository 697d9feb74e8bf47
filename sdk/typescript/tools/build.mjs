// Builds SRC_DIR/handler.ts into a component: type-checks it with the SDK
// (tsc, strict), bundles both into one ES module (esbuild), and
// componentizes that against the repository's wit/, world `handler`
// (componentize-js). scripts/sdk/build-ts and a project's build.sh run it:
//
//   node tools/build.mjs SRC_DIR OUT.wasm SCRATCH_DIR
//   node tools/build.mjs --quick SRC_DIR OUT.js SCRATCH_DIR
//   node tools/build.mjs --runner OUT.wasm SCRATCH_DIR
//
// --quick (./test.sh --quick): the type check, then the project bundled as
// CommonJS with `@idem/handler` left to `require`, for the SDK's quick
// runner (src/runner.ts) that `idem test --sources OUT.js` hands it to: no
// component, so no seconds of componentizing. --runner builds that runner:
// the SDK alone, once per SDK and WIT (a project's build.sh keeps it).
//
// Everything it writes besides OUT goes to SCRATCH_DIR. Prints nothing on
// success; errors go to stderr and exit non-zero.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
const mode = args[0] === '--quick' || args[0] === '--runner' ? args.shift() : 'component';
const usage = 'usage: node tools/build.mjs [--quick] SRC_DIR OUT SCRATCH_DIR | --runner OUT.wasm SCRATCH_DIR';
if (args.length !== (mode === '--runner' ? 2 : 3)) fail(usage);
const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const wit = resolve(sdk, '../../wit');
const [src, out, scratch] = (mode === '--runner' ? [sdk, ...args] : args).map((p) => resolve(p));
// componentize-js makes its work directory under the system temp dir.
process.env.TMPDIR = scratch;
const esbuild = await import('esbuild');
// Settled when the type check has run (none for the runner: the SDK's own
// tests check it).
let typeCheck = Promise.resolve({ status: 0, said: '' });

if (mode === '--runner') {
    const bundle = await bundleEsm([`export { handle } from ${JSON.stringify(join(sdk, 'src/runner.ts'))};`]);
    await writeFile(out, await componentize(bundle));
    process.exit(0);
}

// 1. Type-check the handler's sources with the SDK's, strictly: started
// here, awaited before the output is written, so it runs beside the
// bundling and componentizing (the build takes the longer of the two, not
// their sum). In an `idem new` project (a `.idem` folder) tsc keeps its
// incremental state there, so a rebuild checks only what changed.
const incremental = existsSync(join(src, '.idem')) ? { incremental: true, tsBuildInfoFile: join(src, '.idem/tsc.tsbuildinfo') } : {};
await writeFile(
    join(scratch, 'tsconfig.json'),
    JSON.stringify({
        extends: join(sdk, 'tsconfig.base.json'),
        compilerOptions: { noEmit: true, ...incremental },
        include: [join(src, '**/*.ts'), join(sdk, 'src/**/*.ts')],
    }),
);
typeCheck = new Promise((done) => {
    const tsc = spawn(process.execPath, [join(sdk, 'node_modules/typescript/bin/tsc'), '-p', join(scratch, 'tsconfig.json')]);
    let said = '';
    tsc.stdout.on('data', (d) => (said += d));
    tsc.stderr.on('data', (d) => (said += d));
    tsc.on('error', (e) => done({ status: 1, said: String(e) }));
    tsc.on('close', (status) => done({ status, said }));
});

if (mode === '--quick') {
    // 2q. The project alone, as CommonJS: the runner evaluates it with a
    // `require` that answers its own SDK for `@idem/handler`.
    const bundle = join(scratch, 'handler.js');
    await build({
        entryPoints: [join(src, 'handler.ts')],
        outfile: bundle,
        format: 'cjs',
        external: ['@idem/handler', 'idem:handler/*'],
        // Strict, as the component's ES module is.
        banner: { js: '"use strict";' },
    });
    await typeChecked();
    // Renamed into place: a test never reads half a bundle, even while
    // another build (an editor's on save) writes one.
    const partial = `${out}.${process.pid}.tmp`;
    await writeFile(partial, await readFile(bundle));
    await rename(partial, out);
    process.exit(0);
}

// 2. Bundle. The entry module first neutralises `fetch` (src/component.ts),
// then runs the handler's module (which registers its function), then
// exports the world's `handle`.
const bundle = await bundleEsm([
    `import { assertRegistered } from ${JSON.stringify(join(sdk, 'src/component.ts'))};`,
    `import ${JSON.stringify(join(src, 'handler.ts'))};`,
    `assertRegistered();`,
    `export { handle } from ${JSON.stringify(join(sdk, 'src/component.ts'))};`,
]);
const component = await componentize(bundle);
await typeChecked();
await writeFile(out, component);

/** Fails the build on a type error. */
async function typeChecked() {
    const { status, said } = await typeCheck;
    if (status !== 0) fail(`type errors:\n${said}`.trimEnd());
}

/** esbuild with the settings every bundle shares; a failure is reported. */
async function build(options) {
    try {
        await esbuild.build({
            bundle: true,
            platform: 'neutral',
            target: 'es2022',
            logLevel: 'silent',
            legalComments: 'none',
            // Error classes keep their names (an `HttpError` reads as one) even if renamed apart.
            keepNames: true,
            ...options,
        });
    } catch (e) {
        await typeChecked(); // a type error explains a failed bundle better
        fail(`bundling failed:\n${(e.errors ?? []).map((m) => `${m.location?.file}:${m.location?.line}: ${m.text}`).join('\n') || e}`);
    }
}

/** An entry module of `lines` (the SDK's `component.ts` first), bundled with the SDK as one ES module. */
async function bundleEsm(lines) {
    const entry = join(scratch, 'entry.ts');
    await writeFile(entry, [`import ${JSON.stringify(join(sdk, 'src/component.ts'))};`, ...lines, ''].join('\n'));
    const bundle = join(scratch, 'handler.js');
    await build({
        entryPoints: [entry],
        outfile: bundle,
        format: 'esm',
        // The world's interfaces are the engine's built-in modules.
        external: ['idem:handler/*'],
        alias: { '@idem/handler': join(sdk, 'src/index.ts') },
    });
    return bundle;
}

/**
 * The component of `bundle`, without the features that import wasi:http
 * (the host refuses it): `http` (fetch) and `fetch-event` (incoming
 * requests).
 */
async function componentize(bundle) {
    const componentizeJs = await import('@bytecodealliance/componentize-js');
    let component;
    try {
        ({ component } = await componentizeJs.componentize({
            sourcePath: bundle,
            witPath: wit,
            worldName: 'handler',
            disableFeatures: ['http', 'fetch-event'],
        }));
    } catch (e) {
        await typeChecked();
        fail(`componentize failed:\n${e.message ?? e}`);
    }
    // A last guard: the host would refuse it at load, naming the import.
    const { componentWit } = await import('@bytecodealliance/jco');
    const refused = [...(await componentWit(component)).matchAll(/^\s*import (wasi:http\/\S+);/gm)].map((m) => m[1]);
    if (refused.length > 0) fail(`the component imports ${refused.join(', ')}, which idem refuses`);
    return component;
}

// Named for what the author ran (a project's build.sh), not this script.
function fail(message) {
    process.stderr.write(`build: ${message}\n`);
    process.exit(1);
}
