# Sourced by scripts/test, scripts/demo and scripts/bench: Apache Kafka for
# the run unless KAFKA_BROKERS names a cluster. It starts in the background
# (while the build runs), is waited for before the first client, and is
# stopped when the script exits; its folder, log included, is kept when the
# run failed.
#   broker_begin             start one, unless KAFKA_BROKERS is set
#   broker_ready             wait for it and export KAFKA_BROKERS, and its TLS
#                            listeners' KAFKA_SSL_BROKERS, KAFKA_SASL_SSL_BROKERS,
#                            KAFKA_TLS_CA, … (exit 1 naming the cause)
#   broker_end STATUS        stop it; keep its folder unless STATUS is 0
_broker_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/broker"
_broker_dir=""
_broker_pid=""

broker_begin() {
    [ -z "${KAFKA_BROKERS:-}" ] || return 0
    _broker_dir="$(mktemp -d "${TMPDIR:-/tmp}/idem-kafka.XXXXXX")"
    IDEM_BROKER_OWNER=$$ "$_broker_script" start "$_broker_dir" >"$_broker_dir/started" 2>"$_broker_dir/start.log" &
    _broker_pid=$!
}

broker_ready() {
    [ -n "$_broker_dir" ] || return 0
    if ! wait "$_broker_pid"; then
        cat "$_broker_dir/start.log" >&2
        echo "Apache Kafka did not start (above): nothing ran. KAFKA_BROKERS=host:port names another cluster." >&2
        return 1
    fi
    cat "$_broker_dir/start.log" >&2
    KAFKA_BROKERS="$(cat "$_broker_dir/started")"
    export KAFKA_BROKERS
    # Its TLS and SASL_SSL listeners, for the security tests.
    set -a
    # shellcheck disable=SC1091
    . "$_broker_dir/listeners.env"
    set +a
}

broker_end() {
    [ -n "$_broker_dir" ] || return 0
    # A start still under way finishes first, so that nothing outlives us.
    [ -z "$_broker_pid" ] || wait "$_broker_pid" 2>/dev/null || true
    "$_broker_script" stop "$_broker_dir" || true
    if [ "${1:-1}" = 0 ]; then
        rm -rf "$_broker_dir"
    else
        echo "the broker's folder is kept: $_broker_dir (server.log)" >&2
    fi
    _broker_dir=""
}
