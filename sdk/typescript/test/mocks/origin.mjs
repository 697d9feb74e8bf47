import { host } from './host.mjs';

export function value() {
    host.record('origin.value');
    return host.origin?.value;
}

export function schemaId() {
    host.record('origin.schemaId');
    return host.origin?.schemaId;
}
