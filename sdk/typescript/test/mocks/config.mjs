import { host } from './host.mjs';

export function get(key) {
    return Object.hasOwn(host.config, key) ? host.config[key] : undefined;
}
