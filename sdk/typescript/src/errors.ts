// How a handler fails. Every error the SDK throws is an IdemError that
// knows whether retrying the event may help; anything else a handler lets
// escape is reported as permanent (see `classify`).

import type { HandlerError } from 'idem:handler/types@0.1.0';

/**
 * The base of every error the SDK throws, and of {@link Retryable} and
 * {@link Permanent}, which a handler throws itself. The host rolls back
 * everything the handler did either way, then executes the event again
 * later when {@link IdemError.retryable} is true, and gives up on it
 * otherwise.
 */
export class IdemError extends Error {
    /** Whether executing the event again later may succeed. */
    readonly retryable: boolean;

    /**
     * @param message - What went wrong; it becomes the handler's error text.
     * @param retryable - Whether executing the event again later may succeed.
     */
    constructor(message: string, retryable: boolean) {
        super(message);
        this.name = new.target.name;
        this.retryable = retryable;
    }
}

/**
 * A failure that may pass if the event is executed again later: throw it
 * from a handler to ask the host to retry.
 *
 * @example
 * ```ts
 * if (stock === 0) throw new Retryable("no stock yet"); // the warehouse may restock
 * ```
 */
export class Retryable extends IdemError {
    /** @param message - Why; the host logs it with the retry. */
    constructor(message: string) {
        super(message, true);
    }
}

/**
 * A failure that executing the event again will not fix: throw it from a
 * handler to make the host give up on the event (it goes to the dead
 * letters).
 */
export class Permanent extends IdemError {
    /** @param message - Why; the host keeps it with the dead letter. */
    constructor(message: string) {
        super(message, false);
    }
}

/** The frames of a stack trace worth reporting: the handler's, not the SDK's glue. */
const STACK_FRAMES = 3;
/** The longest error text reported to the host, in characters. */
const MAX_MESSAGE = 2000;

/**
 * What `handle` answers for a value a handler threw: an {@link IdemError}
 * as it classifies itself, anything else as permanent with its name,
 * message and the top of its stack (a bug in the handler will not go away
 * by retrying).
 *
 * @internal
 */
export function classify(thrown: unknown): HandlerError {
    if (thrown instanceof IdemError) {
        return { tag: thrown.retryable ? 'retryable' : 'permanent', val: cap(thrown.message) };
    }
    return { tag: 'permanent', val: cap(describe(thrown)) };
}

/** A one-line account of a value that is not an IdemError. */
function describe(thrown: unknown): string {
    if (thrown instanceof Error) {
        // The error of a world import called directly: its payload says more.
        const payload = (thrown as { payload?: unknown }).payload;
        const message = payload === undefined ? thrown.message : safeJson(payload);
        const frames = stackTail(thrown);
        return `${thrown.name}: ${message}` + (frames ? ` (at ${frames})` : '');
    }
    if (typeof thrown === 'string') return `thrown: ${thrown}`;
    return `thrown ${thrown === null ? 'null' : typeof thrown}: ${safeJson(thrown)}`;
}

/**
 * The top frames of `error`'s stack, from SpiderMonkey's `fn@file:line:col`
 * lines or V8's `    at fn (file:line:col)` ones, without the component's
 * own bindings.
 */
export function stackTail(error: Error): string {
    let stack = error.stack ?? '';
    // V8 starts the stack with the error's own text; SpiderMonkey does not.
    const head = `${error.name}: ${error.message}`;
    if (stack.startsWith(head)) stack = stack.slice(head.length);
    return stack
        .split('\n')
        .map((line) => line.trim())
        .filter((line) => (line.includes('@') || line.startsWith('at ')) && !/initializer\.js|export_handle/.test(line))
        .map((line) => line.replace(/^at /, ''))
        .slice(0, STACK_FRAMES)
        .join(' <- ');
}

function safeJson(value: unknown): string {
    try {
        return JSON.stringify(value, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) ?? String(value);
    } catch {
        return String(value);
    }
}

function cap(message: string): string {
    return message.length <= MAX_MESSAGE ? message : `${message.slice(0, MAX_MESSAGE)}…`;
}
