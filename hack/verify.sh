#!/usr/bin/env bash
# Fails when anything a contributor must regenerate or fix by hand is stale:
# formatting, go.mod/go.sum, generated code, the go.work module list, vet and
# lint findings, or a build that only works inside the workspace. It reports
# every problem it finds, not just the first.
#
# Usage: hack/verify.sh [module...]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=("${PILLAR_MODULES[@]}")
need_tool staticcheck
need_tool actionlint

failed=()
fail() {
	echo "FAIL: $*" >&2
	failed+=("$1")
}
step() { echo ">> $*"; }

cd "$REPO_ROOT"

step "gofmt"
unformatted=$(git ls-files -co --exclude-standard -- '*.go' | while read -r f; do [ -f "$f" ] && echo "$f"; done | xargs -r gofmt -l)
if [ -n "$unformatted" ]; then
	fail "gofmt: run 'gofmt -w' on:" && echo "$unformatted" | sed 's/^/    /' >&2
fi

step "go.work lists every module"
listed=$(GOWORK="$REPO_ROOT/go.work" go work edit -json | awk -F'"' '/"DiskPath"/ { sub(/^\.\//, "", $4); print $4 }' | sort)
found=$(git ls-files -co --exclude-standard -- '*/go.mod' | xargs -r -n1 dirname | grep -v '^tests/tools' | sort)
if [ "$listed" != "$found" ]; then
	fail "go.work: modules on disk and in go.work differ" &&
		diff <(echo "$listed") <(echo "$found") | sed 's/^/    /' >&2 || true
fi

for m in "${modules[@]}"; do
	step "$m: go mod tidy"
	(cd "$m" && GOWORK=off go mod tidy -diff >/dev/null) ||
		fail "$m: go.mod/go.sum are not tidy: run 'cd $m && GOWORK=off go mod tidy'"

	step "$m: build and vet (GOWORK=off, also with -tags kernel)"
	(cd "$m" && GOWORK=off go build ./...) || fail "$m: GOWORK=off go build"
	(cd "$m" && go build ./...) || fail "$m: go build inside the workspace"
	(cd "$m" && GOWORK=off go vet ./... && GOWORK=off go vet -tags kernel ./...) || fail "$m: go vet"

	step "$m: staticcheck"
	(cd "$m" && GOWORK=off staticcheck ./... && GOWORK=off staticcheck -tags kernel ./...) || fail "$m: staticcheck"
done

# The tools module cannot be tidied: `go mod tidy` walks the tests of
# k8s.io/kubernetes' packages, whose dependencies are not published. Its
# go.mod must still be complete, which building the tools (make tools) and
# vetting its own code prove.
step "tests/tools: vet"
(cd tests/tools && GOWORK=off go vet ./...) || fail "tests/tools: go vet"

step "workflows: actionlint"
(shopt -s nullglob; files=(.github/workflows/*.yml .github/workflows/*.yaml); [ ${#files[@]} -eq 0 ] || actionlint "${files[@]}") ||
	fail "workflows: actionlint"

step "generated files"
# Regenerate into a copy of the tree and compare, so the check neither
# depends on git state nor leaves a half-regenerated working tree behind.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
	tar --null -T - -cf - | tar -xf - -C "$scratch"
rm -rf "$scratch/bin" && ln -s "$REPO_ROOT/bin" "$scratch/bin"
if (cd "$scratch" && hack/generate.sh "${modules[@]}" >/dev/null); then
	stale=$({ diff -rq --exclude=bin --exclude=.git "$REPO_ROOT" "$scratch" 2>&1 || true; } |
		{ grep -v "^Only in $REPO_ROOT" || true; })
	if [ -n "$stale" ]; then
		fail "generated files are stale: run 'make generate':" && echo "$stale" | sed "s|$scratch|<regenerated>|g; s/^/    /" >&2
	fi
else
	fail "make generate failed"
fi

if [ -f api/buf.yaml ]; then
	need_tool buf
	step "api: buf lint"
	(cd api && buf lint) || fail "api: buf lint"
	step "api: buf breaking"
	# Compare with the newest released api tag; before the first release
	# there is nothing to break.
	last=$(git tag --list 'api/v*' --sort=-v:refname | head -n1)
	if [ -n "$last" ]; then
		(cd api && buf breaking --against "$REPO_ROOT/.git#tag=$last,subdir=api") ||
			fail "api: buf breaking against $last"
	else
		echo "   no api/v* tag yet: nothing released to compare with"
	fi
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "verify: ${#failed[@]} check(s) failed" >&2
	exit 1
fi
echo "verify: all checks passed"
