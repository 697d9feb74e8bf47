# Sourced by scripts/test: the schema registry the registry formats' tests
# use, started beside the broker, shared by every test binary.
#
#   registry_begin           start one, unless IDEM_TEST_REGISTRY is set
#   registry_ready           wait for it and export IDEM_TEST_REGISTRY (its
#                            …/apis/ccompat/v7 URL; exit 1 naming the cause)
#   registry_end STATUS      stop it; keep its folder unless STATUS is 0
_registry_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/registry"
_registry_dir=""
_registry_pid=""

registry_begin() {
    [ -z "${IDEM_TEST_REGISTRY:-}" ] || return 0
    _registry_dir="$(mktemp -d "${TMPDIR:-/tmp}/idem-registry.XXXXXX")"
    "$_registry_script" start "$_registry_dir" >"$_registry_dir/started" 2>"$_registry_dir/start.log" &
    _registry_pid=$!
}

registry_ready() {
    [ -n "$_registry_dir" ] || return 0
    if ! wait "$_registry_pid"; then
        cat "$_registry_dir/start.log" >&2
        echo "the schema registry did not start (above): nothing ran. IDEM_TEST_REGISTRY=URL names another." >&2
        return 1
    fi
    _registry_pid=""
    cat "$_registry_dir/start.log" >&2
    IDEM_TEST_REGISTRY="$(cat "$_registry_dir/started")"
    export IDEM_TEST_REGISTRY
}

registry_end() {
    [ -n "$_registry_dir" ] || return 0
    [ -z "$_registry_pid" ] || wait "$_registry_pid" 2>/dev/null || true
    "$_registry_script" stop "$_registry_dir" || true
    if [ "${1:-1}" = 0 ]; then
        rm -rf "$_registry_dir"
    else
        echo "the registry's folder is kept: $_registry_dir (registry.log)" >&2
    fi
    _registry_dir=""
}
