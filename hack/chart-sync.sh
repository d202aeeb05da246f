#!/usr/bin/env bash
# Copies what the Helm chart shares with the code into
# deploy/charts/pillar-csi: the CRDs (api/config/crd/, unchanged, into
# crds/), pillar-controller's RBAC rules (csidriver/config/rbac/role.yaml,
# split into the ClusterRole's and the Role's rules, into files/), and the
# values table of the chart's README.md (from values.yaml and
# values.schema.json). Called by hack/generate.sh, so hack/verify.sh finds
# a chart that is stale.
#
# Usage: hack/chart-sync.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"

chart="$REPO_ROOT/deploy/charts/pillar-csi"
[ -d "$chart" ] || die "no chart at $chart"

# CRDs: the chart's crds/ holds exactly the generated ones.
rm -f "$chart"/crds/*.yaml
cp "$REPO_ROOT"/api/config/crd/*.yaml "$chart/crds/"

# RBAC: the rules of each document of role.yaml, by kind. The templates
# add names, namespace and labels.
role="$REPO_ROOT/csidriver/config/rbac/role.yaml"
extract_rules() { # kind
	awk -v kind="$1" '
		/^---$/ { doc++; inrules = 0; next }
		/^kind: / { k[doc] = $2 }
		/^rules:$/ { inrules = 1; next }
		inrules { lines[doc] = lines[doc] $0 "\n" }
		END { for (d in k) if (k[d] == kind) { printf "%s", lines[d]; found = 1 } exit !found }
	' "$role"
}
header="# Copied from csidriver/config/rbac/role.yaml by hack/chart-sync.sh (make
# generate); change the +kubebuilder:rbac markers of the controller instead."
for pair in ClusterRole:controller-clusterrole-rules Role:controller-role-rules; do
	out="$chart/files/${pair#*:}.yaml"
	rules=$(extract_rules "${pair%%:*}") || die "no ${pair%%:*} with rules in $role"
	printf '%s\n%s\n' "$header" "$rules" >"$out"
done

# README values table.
(cd "$REPO_ROOT/tests" && GOWORK=off go run ./chart/cmd/chart-docs -chart "$chart") ||
	die "chart-docs failed"
