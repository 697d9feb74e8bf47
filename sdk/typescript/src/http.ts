/**
 * Outbound HTTP. Every unsafe request (POST, PUT, PATCH, DELETE) carries an
 * `Idempotency-Key` that the host adds: the event id for the invocation's
 * main operation, `<eventId>:<label>` for any other one, named with
 * {@link RequestBuilder.label}. A handler cannot set it; re-sending the
 * same request (after a timeout, or on a retry of the event) reuses its
 * key, so the provider applies it once. Only URLs under the handler's
 * allowlist are reached.
 *
 * @example
 * ```ts
 * http.post(`${config.require("payment_base_url")}/v1/charges`).json({ amount: 10 }).send().raiseForStatus();
 * http.post("https://mail.example/v1/receipts").label("receipt").json({}).send();
 * ```
 *
 * @module
 */

import * as wit from 'idem:handler/http@0.1.0';
import { stringify } from './json.js';
import { HttpError, Response } from './response.js';

export { HttpError, HttpStatusError, Response } from './response.js';

/** Starts a request of any method. */
export function request(method: string, url: string): RequestBuilder {
    return new RequestBuilder(method, url);
}

/** Starts a GET request. */
export function get(url: string): RequestBuilder {
    return request('GET', url);
}

/** Starts a POST request. */
export function post(url: string): RequestBuilder {
    return request('POST', url);
}

/** Starts a PUT request. */
export function put(url: string): RequestBuilder {
    return request('PUT', url);
}

/** Starts a PATCH request. */
export function patch(url: string): RequestBuilder {
    return request('PATCH', url);
}

/** Starts a DELETE request (`http.delete(url)`: `delete` is a reserved word for a function's own name). */
function del(url: string): RequestBuilder {
    return request('DELETE', url);
}
export { del as delete };

const encoder = new TextEncoder();

/** A request being built; nothing is sent before {@link RequestBuilder.send}. */
export class RequestBuilder {
    readonly #request: wit.Request;

    /** @internal Start one with {@link request}, {@link post}, … */
    constructor(method: string, url: string) {
        this.#request = { method, url, headers: [] };
    }

    /**
     * Names this operation, for an invocation that makes more than one
     * unsafe request: its key becomes `<eventId>:<label>`. Letters, digits,
     * `.`, `_` and `-`, at most 64. Keep it stable across retries: never
     * derive it from data read, call order or the attempt number.
     */
    label(label: string): this {
        this.#request.label = label;
        return this;
    }

    /** Adds a header (`Idempotency-Key` is the host's: the request would be refused). */
    header(name: string, value: string): this {
        this.#request.headers.push([name, value]);
        return this;
    }

    /** The body, as bytes or as UTF-8 text. */
    body(body: Uint8Array | string): this {
        this.#request.body = typeof body === 'string' ? encoder.encode(body) : body;
        return this;
    }

    /**
     * Serialises `body` as the JSON body (a bigint as its exact integer) and sets
     * `Content-Type: application/json`.
     *
     * @throws {@link HttpError} (`invalid-request`, permanent) when `body` is not serialisable.
     */
    json(body: unknown): this {
        let text: string;
        try {
            text = stringify(body);
        } catch (e) {
            throw new HttpError({ tag: 'invalid-request', val: `request body is not serializable: ${String(e)}` });
        }
        return this.body(text).header('content-type', 'application/json');
    }

    /**
     * Sends the request and returns the response, whatever its status (see
     * {@link Response.raiseForStatus}).
     *
     * @throws {@link HttpError} when no response came: retryable on a timeout or a failed connection, permanent when the URL is denied or the request invalid.
     */
    send(): Response {
        try {
            return new Response(wit.send(this.#request));
        } catch (e) {
            const payload = (e as { payload?: wit.HttpError } | null)?.payload;
            throw payload === undefined ? e : new HttpError(payload);
        }
    }
}
