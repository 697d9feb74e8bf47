import { host } from './host.mjs';

export function send(message) {
    host.record('emit.send', message);
    return host.emit(message);
}
