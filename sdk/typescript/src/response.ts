// What came back from an HTTP request, and how a request fails.

import type * as wit from 'idem:handler/http@0.1.0';
import { IdemError, Permanent } from './errors.js';

/** An HTTP response, whatever its status. */
export class Response {
    /** The HTTP status, e.g. 201. */
    readonly status: number;
    /** The headers, in order, names as the server sent them. */
    readonly headers: readonly (readonly [string, string])[];
    /** The body as it came. */
    readonly body: Uint8Array;

    /** @internal */
    constructor(raw: wit.Response) {
        this.status = raw.status;
        this.headers = raw.headers;
        this.body = raw.body;
    }

    /** Whether the status is 2xx. */
    get ok(): boolean {
        return this.status >= 200 && this.status < 300;
    }

    /** The first header called `name` (case-insensitive), if any. */
    header(name: string): string | undefined {
        return this.headers.find(([n]) => n.toLowerCase() === name.toLowerCase())?.[1];
    }

    /** The body as text, invalid UTF-8 replaced. */
    text(): string {
        return new TextDecoder().decode(this.body);
    }

    /**
     * The body parsed as JSON; `T` is not checked.
     *
     * @throws {@link Permanent} when the body is not JSON.
     */
    json<T = unknown>(): T {
        try {
            return JSON.parse(this.text()) as T;
        } catch (e) {
            throw new Permanent(`response body is not the expected JSON: ${String(e)}`);
        }
    }

    /**
     * Returns this response when its status is 2xx, and throws an
     * {@link HttpStatusError} otherwise: retryable for 408, 425, 429 and
     * 5xx, permanent for any other status.
     */
    raiseForStatus(): this {
        if (this.ok) return this;
        throw new HttpStatusError(this);
    }
}

/** No response came back. Retryable on `timeout` and `connection`, permanent on `denied` and `invalid-request`. */
export class HttpError extends IdemError {
    /** The world's `http-error` case. */
    readonly kind: 'denied' | 'invalid-request' | 'timeout' | 'connection';

    /** @internal */
    constructor(error: wit.HttpError) {
        super(`http: ${error.tag.replace('-', ' ')}: ${error.val}`, error.tag === 'timeout' || error.tag === 'connection');
        this.kind = error.tag;
    }
}

/** A response whose status is not 2xx, from {@link Response.raiseForStatus}. */
export class HttpStatusError extends IdemError {
    /** The response's status. */
    readonly status: number;
    /** The response itself, body included. */
    readonly response: Response;

    /** @internal */
    constructor(response: Response) {
        const status = response.status;
        super(`HTTP ${status}: ${[...response.text()].slice(0, 200).join('')}`, [408, 425, 429].includes(status) || status >= 500);
        this.status = status;
        this.response = response;
    }
}
