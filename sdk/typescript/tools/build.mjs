// Builds SRC_DIR/handler.ts into a component: type-checks it with the SDK
// (tsc, strict), bundles both into one ES module (esbuild), and
// componentizes that against the repository's wit/, world `handler`
// (componentize-js). scripts/sdk/build-ts runs it; usage:
//
//   node tools/build.mjs SRC_DIR OUT.wasm SCRATCH_DIR
//
// Everything it writes besides OUT.wasm goes to SCRATCH_DIR. Prints
// nothing on success; errors go to stderr and exit non-zero.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const [srcArg, outArg, scratchArg] = process.argv.slice(2);
if (!scratchArg) fail('usage: node tools/build.mjs SRC_DIR OUT.wasm SCRATCH_DIR');
const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const wit = resolve(sdk, '../../wit');
const [src, out, scratch] = [srcArg, outArg, scratchArg].map((p) => resolve(p));
// componentize-js makes its work directory under the system temp dir.
process.env.TMPDIR = scratch;

// 1. Type-check the handler's sources with the SDK's, strictly: started
// here, awaited before the component is written, so it runs beside the
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
const typeCheck = new Promise((done) => {
    const tsc = spawn(process.execPath, [join(sdk, 'node_modules/typescript/bin/tsc'), '-p', join(scratch, 'tsconfig.json')]);
    let said = '';
    tsc.stdout.on('data', (d) => (said += d));
    tsc.stderr.on('data', (d) => (said += d));
    tsc.on('error', (e) => done({ status: 1, said: String(e) }));
    tsc.on('close', (status) => done({ status, said }));
});
const typeChecked = async () => {
    const { status, said } = await typeCheck;
    if (status !== 0) fail(`type errors:\n${said}`.trimEnd());
};

// 2. Bundle. The entry module first neutralises `fetch` (src/component.ts),
// then runs the handler's module (which registers its function), then
// exports the world's `handle`.
const entry = join(scratch, 'entry.ts');
await writeFile(
    entry,
    [
        `import { assertRegistered } from ${JSON.stringify(join(sdk, 'src/component.ts'))};`,
        `import ${JSON.stringify(join(src, 'handler.ts'))};`,
        `assertRegistered();`,
        `export { handle } from ${JSON.stringify(join(sdk, 'src/component.ts'))};`,
        '',
    ].join('\n'),
);
const esbuild = await import('esbuild');
const bundle = join(scratch, 'handler.js');
try {
    await esbuild.build({
        entryPoints: [entry],
        outfile: bundle,
        bundle: true,
        format: 'esm',
        platform: 'neutral',
        target: 'es2022',
        // The world's interfaces are the engine's built-in modules.
        external: ['idem:handler/*'],
        alias: { '@idem/handler': join(sdk, 'src/index.ts') },
        logLevel: 'silent',
        legalComments: 'none',
        // Error classes keep their names (an `HttpError` reads as one) even if renamed apart.
        keepNames: true,
    });
} catch (e) {
    await typeChecked(); // a type error explains a failed bundle better
    fail(`bundling failed:\n${(e.errors ?? []).map((m) => `${m.location?.file}:${m.location?.line}: ${m.text}`).join('\n') || e}`);
}

// 3. Componentize, without the features that import wasi:http (the host
// refuses it): `http` (fetch) and `fetch-event` (incoming requests).
const { componentize } = await import('@bytecodealliance/componentize-js');
let component;
try {
    ({ component } = await componentize({
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
await typeChecked();
await writeFile(out, component);

// Named for what the author ran (a project's build.sh), not this script.
function fail(message) {
    process.stderr.write(`build: ${message}\n`);
    process.exit(1);
}
