#!/usr/bin/env bash
# Regenerates every generated file in place: each module declares its
# generators with //go:generate directives (controller-gen, buf, ...), run
# here with the pinned tools from bin/ first on PATH.
#
# Usage: hack/generate.sh [module...]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=("${PILLAR_MODULES[@]}")

for m in "${modules[@]}"; do
	[ -f "$REPO_ROOT/$m/go.mod" ] || die "no module $m"
	(cd "$REPO_ROOT/$m" && GOWORK=off go generate ./...) || die "go generate failed in $m"
done

# The Helm chart's copies of the CRDs and RBAC rules, and its README table.
"$REPO_ROOT/hack/chart-sync.sh"
