/**
 * Log through the host, which tags every line with the handler and the
 * event id, at the level asked. (`console.log` writes to the component's
 * stdout: the host logs that too, as untagged `guest` lines, and traps an
 * invocation that writes more than 64 KiB to it.)
 *
 * @module
 */

import * as wit from 'idem:handler/log@0.1.0';

/** Logs `message` at level `trace`. */
export function trace(message: string): void {
    wit.log('trace', message);
}

/** Logs `message` at level `debug`. */
export function debug(message: string): void {
    wit.log('debug', message);
}

/** Logs `message` at level `info`. */
export function info(message: string): void {
    wit.log('info', message);
}

/** Logs `message` at level `warn`. */
export function warn(message: string): void {
    wit.log('warn', message);
}

/** Logs `message` at level `error`. */
export function error(message: string): void {
    wit.log('error', message);
}
