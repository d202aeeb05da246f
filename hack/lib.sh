# Shared helpers for the scripts in hack/. Source it; do not run it.

# The workspace's Go modules in release order; the Makefile passes the same
# list, this is the default for running a script by hand.
PILLAR_MODULES=(api fencing configfs backends csidriver agent tests)

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$REPO_ROOT/bin:$PATH"

die() {
	echo "$(basename "$0"): $*" >&2
	exit 1
}

need_tool() {
	command -v "$1" >/dev/null || die "$1 not found in bin/ or PATH; run 'make tools'"
}
