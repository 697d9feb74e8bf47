// `node --import ./test/register.mjs --test …`: see hooks.mjs.
import { register } from 'node:module';

if (!process.env.IDEM_SDK_DIST) throw new Error('IDEM_SDK_DIST is not set: run scripts/sdk/check-ts');
register('./hooks.mjs', import.meta.url, { data: { dist: process.env.IDEM_SDK_DIST } });
