#!/usr/bin/env bash
# One release of what a user installs: the images tagged VERSION, the chart
# packaged with version and appVersion VERSION (so its default image tags
# are VERSION), both pushed to REGISTRY, and CHANGELOG.md's Unreleased
# section turned into VERSION's. The Go modules are versioned on their own
# (RELEASING.md); the plan lists the command that plans each.
#
# Usage: hack/release.sh VERSION [REGISTRY]   (make release VERSION=x.y.z [REGISTRY=host/path] [DO=1])
#
# Without DO=1 nothing is built, pushed or changed: the plan is printed,
# and the chart is packaged into a scratch directory and checked, so a dry
# run proves the chart takes the version.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

version=${1:-}
registry=${2:-}
do=${DO:-}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	die "VERSION=\"$version\": want x.y.z or x.y.z-pre, without a leading v (make release VERSION=0.2.0)"
need_tool helm
cd "$REPO_ROOT"

changelog=CHANGELOG.md
grep -q '^## \[Unreleased\]' "$changelog" || die "$changelog has no '## [Unreleased]' section"
unreleased=$(awk '/^## \[Unreleased\]/ { on = 1; next } /^## / { on = 0 } on && /^- / { n++ } END { print n + 0 }' "$changelog")
[ "$unreleased" -gt 0 ] || die "$changelog: nothing under [Unreleased] to release"
grep -q "^## \[$version\]" "$changelog" && die "$changelog already has a section for $version"
date=$(date -u +%Y-%m-%d)

plan() { printf '  %s\n' "$*"; }
echo "release $version$([ -n "$do" ] || echo ' (dry run: DO=1 performs it)')"
echo "1. images tagged $version, their binaries stamped $version:"
plan "make images VERSION=$version"
echo "2. the chart, version and appVersion $version (default image tags $version):"
plan "helm package deploy/charts/pillar-csi --version $version --app-version $version -d bin/release"
echo "3. $changelog: [Unreleased] ($unreleased entries) becomes [$version] - $date"
if [ -n "$registry" ]; then
	echo "4. push to $registry:"
	plan "make push REGISTRY=$registry VERSION=$version"
	plan "helm push bin/release/pillar-csi-$version.tgz oci://$registry"
else
	echo "4. no REGISTRY=: nothing pushed"
fi
echo "5. the Go modules, each on its own version (RELEASING.md), in release order:"
for m in api fencing configfs backends csidriver agent; do
	plan "make release-plan MODULE=$m"
done

# The chart takes the version: package it and read it back.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
out=bin/release
[ -n "$do" ] || out=$scratch
mkdir -p "$out"
helm package deploy/charts/pillar-csi --version "$version" --app-version "$version" -d "$out" >/dev/null
pkg="$out/pillar-csi-$version.tgz"
chart=$(helm show chart "$pkg")
for f in version appVersion; do
	got=$(awk -v f="$f:" '$1 == f { gsub(/"/, "", $2); print $2 }' <<<"$chart")
	[ "$got" = "$version" ] || die "the packaged chart's $f is \"$got\", want $version"
done
images=$(helm template x "$pkg" --kube-version 1.30.0 --set 'storageNodes[0].name=s1,storageNodes[0].address=192.0.2.1' |
	awk '$1 == "image:" { gsub(/"/, "", $2); print $2 }' | sort -u)
for i in $images; do
	case $i in
	ghcr.io/pillar-csi/*:"$version") ;;
	registry.k8s.io/sig-storage/*) ;;
	*) die "the packaged chart runs $i, not a pillar-csi image tagged $version" ;;
	esac
done
echo "checked: $(basename "$pkg") has version and appVersion $version, and runs:"
printf '  %s\n' $images

[ -n "$do" ] || exit 0

[ -z "$(git status --porcelain)" ] || die "the working tree is not clean: release from a commit"
make images VERSION="$version"
awk -v v="$version" -v d="$date" '
	/^## \[Unreleased\]/ { print; print ""; print "## [" v "] - " d; next }
	{ print }' "$changelog" >"$changelog.tmp" && mv "$changelog.tmp" "$changelog"
if [ -n "$registry" ]; then
	make push REGISTRY="$registry" VERSION="$version"
	helm push "$pkg" "oci://$registry"
fi
echo "done: commit $changelog, then tag the modules as their plans say"
