// The component's export `handle`, and the registration of the function it runs.

import type { Event as WitEvent, HandlerError } from 'idem:handler/types@0.1.0';
import { Db } from './db.js';
import { classify, Permanent } from './errors.js';
import { Event } from './event.js';

/**
 * A handler: it gets one validated event at a time, in a transaction the
 * host owns. Returning commits everything it did through `db` and `emit`;
 * throwing rolls it all back (see {@link handler} for how a throw is
 * reported). It is synchronous: the world is, and so is every SDK call.
 */
export type Handler = (event: Event, db: Db) => void;

/** What the world's `handle` returns. @internal */
export type Outcome = { tag: 'ok'; val: undefined } | { tag: 'err'; val: HandlerError };

let registered: Handler | undefined;

/**
 * Registers `fn` as the component's handler, once, at the top level of the
 * handler's module (which runs at build time: call no other SDK function
 * there). What `fn` throws fails the event:
 *
 * - {@link Retryable}, and the SDK's retryable errors (a transient database
 *   error, an HTTP timeout, connection failure, 408, 425, 429 or 5xx):
 *   retried later;
 * - {@link Permanent}, the SDK's other errors: given up on;
 * - anything else (a TypeError, a string…): permanent too, reported as its
 *   name and message followed by the top of its stack, e.g.
 *   `TypeError: x is undefined (at handle@source.js:12:9 <- …)`.
 *
 * The instance may be kept for later events: state kept in module-level
 * variables outlives the event (and is not rolled back with it).
 *
 * @example
 * ```ts
 * import { handler, Db } from "@idem/handler";
 *
 * handler((event, db) => {
 *     db.execute("INSERT INTO audit.seen (event_id) VALUES ($1)", [Db.uuid(event.id)]);
 * });
 * ```
 */
export function handler(fn: Handler): void {
    if (registered !== undefined) throw new Error('handler() is called more than once: a component has one handler');
    registered = fn;
}

/**
 * The world's export: runs the registered handler on `raw` and answers
 * its outcome (never throws: a throw from here would trap the instance).
 *
 * @internal
 */
export function handle(raw: WitEvent): Outcome {
    try {
        if (registered === undefined) throw new Permanent('no handler: call handler(fn) in the handler module');
        const returned: unknown = registered(new Event(raw), new Db());
        if (typeof (returned as PromiseLike<unknown> | undefined)?.then === 'function') {
            // Its rejection would go unnoticed, and its remaining work would run after the commit.
            throw new Permanent('the handler returned a Promise: handlers are synchronous, remove `async`');
        }
        return { tag: 'ok', val: undefined };
    } catch (e) {
        return { tag: 'err', val: classify(e) };
    }
}

/** Fails the build of a module that never called {@link handler}. @internal */
export function assertRegistered(): void {
    if (registered === undefined) throw new Error('the handler module never calls handler(fn)');
}
