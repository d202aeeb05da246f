#!/usr/bin/env bash
# Prints the release plan for one module: where it stands, which pillar-csi
# modules must be tagged first, what changed in its API since its last tag
# (apidiff), the version that follows, and the commands that gate and make
# the tag. It changes nothing; RELEASING.md explains each step.
#
# Usage: hack/release-plan.sh MODULE
set -euo pipefail
source "$(dirname "$0")/lib.sh"

m=${1:-}
[ -n "$m" ] || die "usage: make release-plan MODULE=<$(IFS=\|; echo "${PILLAR_MODULES[*]}")>"
cd "$REPO_ROOT"
grep -q "^  - name: $m\$" versions.yaml || die "$m is not a released module (see versions.yaml)"
need_tool apidiff

modpath=github.com/pillar-csi/pillar-csi/$m
registered=$(awk -v m="$m" '$0 == "  - name: " m { found = 1; next } found && $1 == "version:" { print $2; exit }' versions.yaml)
last=$(git tag --list "$m/v*" --sort=-v:refname | head -n1)
last_version=${last#"$m/"}

echo "Release plan for $modpath"
echo
echo "1. Where it stands"
echo "   newest tag:           ${last:-none}"
echo "   versions.yaml entry:  $registered"
if [ "${last_version:-unreleased}" != "$registered" ]; then
	echo "   !! versions.yaml and the tags disagree: fix versions.yaml first"
fi

echo
echo "2. pillar-csi modules it requires (each must be tagged first and required at that tag)"
blocked=0
deps=$(cd "$m" && GOWORK=off go list -m -f '{{if not .Main}}{{.Path}} {{.Version}}{{end}}' all | grep "^github.com/pillar-csi/pillar-csi/" || true)
while read -r dep ver; do
	[ -n "$dep" ] || continue
	depname=${dep#github.com/pillar-csi/pillar-csi/}
	deptag=$(git tag --list "$depname/v*" --sort=-v:refname | head -n1)
	if [ -z "$deptag" ]; then
		echo "   !! $depname: required at $ver but never released: release $depname first"
		blocked=1
	elif [ "$depname/$ver" != "$deptag" ]; then
		echo "   !! $depname: required at $ver, newest tag is $deptag: require ${deptag#"$depname/"}"
		blocked=1
	else
		echo "   ok $depname $ver"
	fi
done <<<"$deps"
[ -n "$deps" ] || echo "   none"
[ $blocked -eq 0 ] || echo "   (blocked until the lines marked !! are fixed)"

echo
echo "3. API changes since ${last:-the beginning}"
scratch=$(mktemp -d)
trap 'git worktree remove --force "$scratch/old" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
(cd "$m" && GOWORK=off apidiff -m -w "$scratch/new.export" "$modpath")
if [ -z "$last" ]; then
	echo "   first release: nothing to compare with"
	next=v0.1.0
else
	git worktree add --detach "$scratch/old" "$last" >/dev/null 2>&1 || die "cannot check out $last"
	(cd "$scratch/old/$m" && GOWORK=off apidiff -m -w "$scratch/old.export" "$modpath")
	report=$(apidiff -m "$scratch/old.export" "$scratch/new.export")
	echo "${report:-   (no API changes)}" | sed 's/^/   /'
	IFS=. read -r major minor patch <<<"${last_version#v}"
	if grep -q '^Incompatible changes:' <<<"$report"; then
		# Below v1 an incompatible change bumps the minor version.
		if [ "$major" = 0 ]; then next=v0.$((minor + 1)).0; else next=v$((major + 1)).0.0; fi
		[ "$major" = 0 ] || echo "   !! incompatible changes need a new major version path (/v$((major + 1)))"
	elif grep -q '^Compatible changes:' <<<"$report"; then
		next=v$major.$((minor + 1)).0
	else
		next=v$major.$minor.$((patch + 1))
	fi
fi

echo
echo "4. Gates (all must pass on the commit to be tagged)"
echo "   cd $m && GOWORK=off go build ./... && GOWORK=off go test ./..."
echo "   make verify"
echo "   make test-kernel   # when $m has real-kernel tests"

echo
echo "5. Tag (version suggested by the API diff: $next)"
echo "   set 'version: $next' for $m in versions.yaml and commit it"
echo "   git tag -a $m/$next -m '$m $next'"
echo "   git push origin $m/$next"
