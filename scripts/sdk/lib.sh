# Shared by scripts/sdk/*: where the tools live, and componentize-py,
# installed on first use exactly as scripts/test does (pinned, in a
# virtualenv of its own under $IDEM_TOOLS).
tools="${IDEM_TOOLS:-/var/tmp/idem-tools}"
. "$(dirname "${BASH_SOURCE[0]}")/../trust.sh"
componentize="$tools/componentize-py/bin/componentize-py"

ensure_componentize_py() {
    if [ ! -x "$componentize" ]; then
        echo "${0##*/}: installing componentize-py 0.25.1 into $tools/componentize-py" >&2
        rm -rf "$tools/componentize-py"
        python3 -m venv "$tools/componentize-py"
        "$tools/componentize-py/bin/pip" install -q componentize-py==0.25.1
    fi
}
