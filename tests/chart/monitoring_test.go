package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

var monitoringOn = map[string]any{"monitoring": map[string]any{
	"podMonitors":    map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
	"prometheusRule": map[string]any{"enabled": true},
	"dashboard":      map[string]any{"enabled": true},
}}

// Off by default; asked for where the Operator's API is missing, the
// install fails and says why.
func TestMonitoringOffByDefaultAndRefusedWithoutTheAPI(t *testing.T) {
	r := render(t, release{name: "pillar-csi", namespace: "storage-system"})
	for _, kind := range []string{"PodMonitor", "PrometheusRule"} {
		if got := r.find(kind); len(got) != 0 {
			t.Errorf("%d %s rendered by default", len(got), kind)
		}
	}
	if r.has("ConfigMap", "pillar-csi-dashboard") {
		t.Error("the dashboard's ConfigMap is rendered by default")
	}
	_, err := template(t, release{name: "pillar-csi", namespace: "storage-system", values: monitoringOn})
	if err == nil || !strings.Contains(err.Error(), "does not serve monitoring.coreos.com/v1") {
		t.Errorf("monitoring without the Operator's API: %v, want a failure naming monitoring.coreos.com/v1", err)
	}
}

// pillarMetric is a pillar metric's name in a PromQL expression.
var pillarMetric = regexp.MustCompile(`\bpillar_(?:agent|controller)_[a-z0-9_]+\b`)

// servedMetrics are the metric names of the generated references: what
// the binaries register (docs/reference/pillar-*-metrics.md, kept fresh
// by make verify), with a histogram's series.
func servedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_]+)` \\| ([a-z]+) \\|")
	served := map[string]bool{}
	for _, bin := range []string{"pillar-agent", "pillar-controller"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "reference", bin+"-metrics.md"))
		if err != nil {
			t.Fatal(err)
		}
		rows := row.FindAllStringSubmatch(string(b), -1)
		if len(rows) == 0 {
			t.Fatalf("%s-metrics.md lists no metric", bin)
		}
		for _, m := range rows {
			served[m[1]] = true
			if m[2] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					served[m[1]+s] = true
				}
			}
		}
	}
	return served
}

// checkExpr fails on a metric the binaries do not serve and on what is
// plainly not PromQL: unbalanced brackets, template text left over.
func checkExpr(t *testing.T, where, expr string, served map[string]bool, used map[string]bool) {
	t.Helper()
	if strings.Contains(expr, "{{") || strings.Contains(expr, "}}") {
		t.Errorf("%s: template text left in %q", where, expr)
	}
	depth := map[rune]int{}
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	for _, c := range expr {
		switch c {
		case '(', '[', '{':
			depth[c]++
		case ')', ']', '}':
			if depth[pairs[c]]--; depth[pairs[c]] < 0 {
				t.Errorf("%s: unbalanced %q in %q", where, c, expr)
			}
		}
	}
	for c, d := range depth {
		if d != 0 {
			t.Errorf("%s: unbalanced %q in %q", where, c, expr)
		}
	}
	names := pillarMetric.FindAllString(expr, -1)
	if len(names) == 0 {
		t.Errorf("%s: %q names no pillar metric", where, expr)
	}
	for _, n := range names {
		if !served[n] {
			t.Errorf("%s: %q uses %s, which no binary serves (docs/reference/pillar-*-metrics.md)", where, expr, n)
		}
		used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
	}
}

func TestMonitoring(t *testing.T) {
	const ns = "storage-system"
	r := render(t, release{name: "pillar-csi", namespace: ns, values: monitoringOn, apiVersions: []string{"monitoring.coreos.com/v1"}})
	n := names("pillar-csi")
	served := servedMetrics(t)
	used := map[string]bool{}

	// Each PodMonitor selects its component's pods, in the release's
	// namespace, on a port those pods name.
	pods := map[string]corev1.PodTemplateSpec{
		"controller": get[appsv1.Deployment](t, r, "Deployment", n.controller).Spec.Template,
		"agent":      get[appsv1.DaemonSet](t, r, "DaemonSet", n.agent).Spec.Template,
	}
	if got := len(r.find("PodMonitor")); got != len(pods) {
		t.Errorf("%d PodMonitors, want %d", got, len(pods))
	}
	for component, pod := range pods {
		pm := object(t, r, "PodMonitor", "pillar-csi-"+component)
		if pm.GetNamespace() != ns || pm.GetLabels()["release"] != "prometheus" {
			t.Errorf("PodMonitor %s: namespace %q, labels %v", pm.GetName(), pm.GetNamespace(), pm.GetLabels())
		}
		sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
		if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)) {
			t.Errorf("PodMonitor %s selects %v; the %s pods are labelled %v", pm.GetName(), sel, component, pod.Labels)
		}
		for other, p := range pods {
			if other != component && labels.SelectorFromSet(sel).Matches(labels.Set(p.Labels)) {
				t.Errorf("PodMonitor %s selects the %s pods too", pm.GetName(), other)
			}
		}
		nsNames, _, _ := unstructured.NestedStringSlice(pm.Object, "spec", "namespaceSelector", "matchNames")
		if len(nsNames) != 1 || nsNames[0] != ns {
			t.Errorf("PodMonitor %s: namespaces %v", pm.GetName(), nsNames)
		}
		eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
		if len(eps) != 1 {
			t.Fatalf("PodMonitor %s: %d endpoints", pm.GetName(), len(eps))
		}
		port, _ := eps[0].(map[string]any)["port"].(string)
		found := false
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				found = found || p.Name == port
			}
		}
		if !found {
			t.Errorf("PodMonitor %s scrapes port %q, which no container of the %s pods names", pm.GetName(), port, component)
		}
	}

	// Every alert: an expression over served metrics, a severity, and
	// words for the one it pages.
	rule := object(t, r, "PrometheusRule", "pillar-csi")
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	alerts := map[string]bool{}
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, x := range rules {
			a := x.(map[string]any)
			name, _ := a["alert"].(string)
			expr, _ := a["expr"].(string)
			alerts[name] = true
			checkExpr(t, "alert "+name, expr, served, used)
			if sev, _, _ := unstructured.NestedString(a, "labels", "severity"); sev != "warning" && sev != "critical" {
				t.Errorf("alert %s: severity %q", name, sev)
			}
			for _, k := range []string{"summary", "description"} {
				if s, _, _ := unstructured.NestedString(a, "annotations", k); len(s) < 20 {
					t.Errorf("alert %s: annotation %s is %q", name, k, s)
				}
			}
		}
	}
	// What the issue and docs/monitoring.md promise an operator.
	for _, a := range []string{"PillarAgentNotReady", "PillarFencingRejections", "PillarAgentCertificateExpiresSoon", "PillarCSIErrorRatioHigh", "PillarStoreNearlyFull"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}

	// The dashboard: JSON, with a query over served metrics in every
	// panel.
	cm := get[corev1.ConfigMap](t, r, "ConfigMap", "pillar-csi-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v: Grafana's sidecar looks for grafana_dashboard=1", cm.Labels)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["pillar-csi.json"]), &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: uid %q, %d panels", dash.UID, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkExpr(t, "panel "+p.Title, q.Expr, served, used)
		}
	}

	// Between them, alerts and dashboard show every pillar metric but
	// build information.
	for m := range served {
		if strings.HasSuffix(m, "_bucket") || strings.HasSuffix(m, "_sum") || strings.HasSuffix(m, "_count") || strings.HasSuffix(m, "_build_info") {
			continue
		}
		if !used[m] {
			t.Errorf("metric %s is in neither an alert nor the dashboard", m)
		}
	}
}

// object returns the rendered object of a kind and name.
func object(t *testing.T, r *rendered, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range r.find(kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %q rendered", kind, name)
	return nil
}
