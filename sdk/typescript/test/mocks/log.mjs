import { host } from './host.mjs';

export function log(level, message) {
    host.logs.push([level, message]);
}
