/**
 * The handler's configuration: the key/values under `[handler.config]` in
 * the host's config file.
 *
 * @module
 */

import * as wit from 'idem:handler/config@0.1.0';
import { Permanent } from './errors.js';

/** The value configured for `key`, if any. */
export function get(key: string): string | undefined {
    return wit.get(key);
}

/**
 * The value configured for `key`.
 *
 * @throws {@link Permanent} naming the key when it is missing (retrying will not make the operator add it).
 */
function requireKey(key: string): string {
    const value = wit.get(key);
    if (value === undefined) throw new Permanent(`config key \`${key}\` is not set for this handler`);
    return value;
}
export { requireKey as require };
