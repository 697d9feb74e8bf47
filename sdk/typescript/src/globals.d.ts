// The globals StarlingMonkey (the JavaScript engine componentize-js builds
// on) offers that the SDK and handlers may use. The compiler's `lib` is
// ES2022 alone: neither the DOM's nor Node's declarations describe this
// engine, so only what is known to work here is declared.

declare class TextEncoder {
    encode(input?: string): Uint8Array;
}

declare class TextDecoder {
    constructor(label?: string, options?: { fatal?: boolean });
    decode(input?: Uint8Array): string;
}

/** Writes to the component's stdout and stderr, which the host logs (64 KiB per invocation at most). */
declare const console: {
    log(...data: unknown[]): void;
    error(...data: unknown[]): void;
};
