#!/usr/bin/env bash
# Builds one tool binary, or copies it from the tool cache when the same
# build was done before: same Go toolchain, same command, same inputs. The
# pinned tools (kube-apiserver, kubelet, e2e.test, the sidecars, ...) only
# change with the module that pins them, and linking them alone takes
# minutes on a 2-core machine; a fresh checkout on a machine that built
# them before gets them in seconds. Nothing depends on the cache: without
# it (or with TOOL_CACHE empty) every tool is built as usual.
#
# Usage: hack/toolcache.sh OUT INPUT... -- COMMAND...
#   OUT      the binary COMMAND writes
#   INPUT    files whose content the build depends on (go.mod, go.sum,
#            local sources); the command line is part of the key too, with
#            OUT's own path left out, so every checkout shares the cache
set -euo pipefail

: "${TOOL_CACHE=/var/cache/pillar-csi/tools}"
# How many builds of one tool the cache keeps.
keep=3

out=$1
shift
inputs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	inputs+=("$1")
	shift
done
[ "${1:-}" = -- ] || { echo "usage: $0 OUT INPUT... -- COMMAND..." >&2; exit 2; }
shift

name=$(basename "$out")
build() {
	"$@"
	touch "$out" # go build leaves an up-to-date binary's mtime alone
}
if [ -z "$TOOL_CACHE" ] || ! mkdir -p "$TOOL_CACHE" 2>/dev/null; then
	build "$@"
	exit 0
fi

cmdline=$(printf '%q ' "$@")
key=$({
	go version
	go env GOOS GOARCH CGO_ENABLED
	echo "${cmdline//$out/OUT}"
	for f in "${inputs[@]}"; do
		echo "$f"
		cat "$f"
	done
} | sha256sum | cut -c1-32)
cached=$TOOL_CACHE/$name-$key

if [ -f "$cached" ]; then
	echo ">> $name: from the tool cache ($cached)"
	mkdir -p "$(dirname "$out")"
	cp "$cached" "$out.tmp" && mv "$out.tmp" "$out"
	touch "$cached" # most recently used
	exit 0
fi
build "$@"
cp "$out" "$cached.tmp.$$" && mv "$cached.tmp.$$" "$cached"
# Keep the newest few builds of this tool.
ls -t "$TOOL_CACHE/$name"-* 2>/dev/null | tail -n +$((keep + 1)) | xargs -r rm -f
