import { host } from './host.mjs';

export function send(request) {
    host.record('http.send', request);
    return host.http(request);
}
