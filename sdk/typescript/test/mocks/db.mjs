import { host } from './host.mjs';

export function execute(statement, params) {
    host.record('db.execute', statement, params);
    return host.execute(statement, params);
}

export function query(statement, params) {
    host.record('db.query', statement, params);
    return host.query(statement, params);
}
