#!/usr/bin/env bash
# The oldest supported Kubernetes (make test-floor) is proven for a tree,
# not for every run: what its suites test is pillar-controller (the csidriver
# module and every module it requires from this repository) against
# kube-apiserver as pinned by tests/tools/oldkube. `record` writes the hash
# of that tree into tests/tools/oldkube/PROVEN after a passing run;
# `check` succeeds when the working tree still has that hash, so make check
# runs the floor's suites again exactly when something they test changed
# (or the record was never committed), and otherwise says when and on what
# they passed.
#
# Usage: hack/floor.sh hash|check|record
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

record=tests/tools/oldkube/PROVEN

# The paths whose content the floor's suites depend on: csidriver, the
# sibling modules its go.mod replaces with local directories, and the
# floor's own pins.
paths() {
	echo csidriver tests/tools/oldkube/go.mod tests/tools/oldkube/go.sum
	awk '$1 == "replace" && $4 ~ /^\.\.\// { sub(/^\.\.\//, "", $4); print $4 }' csidriver/go.mod
}

# The hash of those paths as they are in the working tree (committed or
# not, untracked files included, ignored files not), through a scratch
# index so that git's own index is left alone.
tree_hash() {
	local idx
	idx=$(mktemp)
	trap 'rm -f "$idx"' RETURN
	GIT_INDEX_FILE=$idx git read-tree HEAD
	# shellcheck disable=SC2046
	GIT_INDEX_FILE=$idx git add -A -- $(paths)
	# shellcheck disable=SC2046
	git ls-tree "$(GIT_INDEX_FILE=$idx git write-tree)" -- $(paths | sort) | sha256sum | cut -d' ' -f1
}

case ${1:-} in
hash) tree_hash ;;
check)
	want=$(tree_hash)
	if [ -f "$record" ] && [ "$(awk '$1 == "tree" { print $2 }' "$record")" = "$want" ]; then
		echo "proven for this tree: $(awk '$1 == "passed" { $1 = ""; print substr($0, 2) }' "$record")"
		exit 0
	fi
	echo "not proven for this tree ($want)"
	exit 1
	;;
record)
	{
		echo "# Written by make test-floor when pillar-controller's suites passed on"
		echo "# the oldest supported kube-apiserver; hack/floor.sh says what it covers."
		echo "tree $(tree_hash)"
		echo "passed $(date -u +%Y-%m-%d) on kube-apiserver $2"
	} >"$record"
	echo "recorded in $record: commit it with the change it proves"
	;;
*) die "usage: $0 hash|check|record VERSION" ;;
esac
