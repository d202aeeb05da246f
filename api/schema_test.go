package api_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// These tests read the generated CRDs of config/crd and check the regular
// expressions inside their CEL rules against independent implementations:
// the standard library's IP parser, and the api/export contract that the
// agent and the node apply in Go. CEL's matches() uses RE2, the syntax of
// Go's regexp package, so compiling the patterns here tests what the API
// server runs.

func loadCRD(t testing.TB, plural string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("config", "crd", "pillar-csi.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

// property walks a dotted path (array items are entered transparently).
func property(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition, path string) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	s := *crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, p := range strings.Split(path, ".") {
		if s.Type == "array" {
			s = *s.Items.Schema
		}
		next, ok := s.Properties[p]
		if !ok {
			t.Fatalf("%s: no property %s in %s", crd.Name, p, path)
		}
		s = next
	}
	return s
}

var matchesRE = regexp.MustCompile(`matches\('([^']*)'\)`)

// patterns returns the regular expressions of the field's rule whose
// message starts with prefix.
func patterns(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition, path, prefix string) []*regexp.Regexp {
	t.Helper()
	for _, v := range property(t, crd, path).XValidations {
		if !strings.HasPrefix(v.Message, prefix) {
			continue
		}
		var out []*regexp.Regexp
		for _, m := range matchesRE.FindAllStringSubmatch(v.Rule, -1) {
			out = append(out, regexp.MustCompile(m[1]))
		}
		if len(out) == 0 {
			t.Fatalf("%s %s: rule %q has no matches()", crd.Name, path, v.Rule)
		}
		return out
	}
	t.Fatalf("%s %s: no rule with message %q", crd.Name, path, prefix)
	return nil
}

// isIPRule evaluates the IPAddress rule: self.matches(v4) || self.matches(v6).
func isIPRule(res []*regexp.Regexp) func(string) bool {
	return func(s string) bool {
		return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
	}
}

// wantIP is the independent answer: the standard library's parser, without
// zones (nvmet's addr_traddr takes none).
func wantIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}

var ipCorpus = []string{
	"0.0.0.0", "192.0.2.10", "255.255.255.255", "10.0.0.1", "1.2.3.4",
	"256.0.0.1", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.04", "1.2.3.-4", " 1.2.3.4", "1.2.3.4 ", "1..2.3",
	"::", "::1", "1::", "2001:db8::10", "2001:DB8::10", "fe80::1", "fe80::1%eth0", "1:2:3:4:5:6:7:8",
	"1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1::8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7", ":::", "2001:db8:::1",
	"1::2::3", "::ffff:192.0.2.1", "::192.0.2.1", "64:ff9b::192.0.2.33", "1:2:3:4:5:6:1.2.3.4",
	"1:2:3:4:5:6:7:1.2.3.4", "::ffff:1.2.3.256", "12345::", "g::", "", "localhost", "[::1]",
}

func TestIPAddressRuleAgreesWithNetip(t *testing.T) {
	for _, c := range []struct{ plural, path string }{
		{"pillarprotocols", "spec.nvmeofTCP.bindAddress"},
		{"pillarvolumestates", "spec.export.bindAddress"},
	} {
		match := isIPRule(patterns(t, loadCRD(t, c.plural), c.path, "must be an IPv4 address"))
		for _, s := range ipCorpus {
			if got, want := match(s), wantIP(s); got != want {
				t.Errorf("%s %s: rule accepts %q = %v, net/netip says %v", c.plural, c.path, s, got, want)
			}
		}
	}
}

// FuzzIPAddressRule compares the rule with net/netip on arbitrary strings
// and on mutations of valid addresses.
func FuzzIPAddressRule(f *testing.F) {
	for _, s := range ipCorpus {
		f.Add(s)
	}
	match := isIPRule(patterns(f, loadCRD(f, "pillarprotocols"), "spec.nvmeofTCP.bindAddress", "must be an IPv4 address"))
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := match(s), wantIP(s); got != want {
			t.Fatalf("rule accepts %q = %v, net/netip says %v", s, got, want)
		}
	})
}

// The agent address rule accepts what the IP rule accepts, plus DNS names,
// but no dotted digits that are not an IPv4 address.
func TestAgentAddressRule(t *testing.T) {
	res := patterns(t, loadCRD(t, "pillaragents"), "spec.address", "must be an IPv4 address, an IPv6 address")
	// The rule is: v4 || v6 || (!digitsAndDots && dnsName).
	if len(res) != 4 {
		t.Fatalf("address rule has %d patterns, want 4", len(res))
	}
	v4, v6, digitsAndDots, dns := res[0], res[1], res[2], res[3]
	rule := func(s string) bool {
		return v4.MatchString(s) || v6.MatchString(s) || (!digitsAndDots.MatchString(s) && dns.MatchString(s))
	}
	for _, s := range ipCorpus {
		if wantIP(s) && !rule(s) {
			t.Errorf("address rule refuses IP %q", s)
		}
	}
	for s, want := range map[string]bool{
		"storage-1": true, "storage-1.example.com": true, "a": true,
		"192.0.2.256": false, "1.2.3": false, "Storage-1": false, "storage_1": false, "-storage": false,
		"storage-": false, "storage..example": false, "fe80::1%eth0": false,
	} {
		if got := rule(s); got != want {
			t.Errorf("address rule accepts %q = %v, want %v", s, got, want)
		}
	}
}

// The CRDs and the Go contract of api/export must agree on what an NQN and
// a volume ID are, or the API server would store values the agent refuses.
func TestSchemaPatternsMatchExportContract(t *testing.T) {
	vs := loadCRD(t, "pillarvolumestates")
	for _, c := range []struct {
		path, prefix, want string
	}{
		{"spec.export.subsystemNQN", "must be an NVMe Qualified Name", export.NQNPattern},
		{"spec.publications.hostNQN", "must be an NVMe Qualified Name", export.NQNPattern},
		{"spec.volumeID", "must be a pillar-csi volume ID", export.VolumeIDPattern},
	} {
		res := patterns(t, vs, c.path, c.prefix)
		if len(res) != 1 || res[0].String() != c.want {
			t.Errorf("%s: schema pattern %v, api/export has %q", c.path, res, c.want)
		}
	}
	if got := *property(t, vs, "spec.volumeID").MaxLength; got != export.MaxVolumeIDLength {
		t.Errorf("spec.volumeID maxLength %d, api/export allows %d", got, export.MaxVolumeIDLength)
	}
	if got := *property(t, vs, "spec.export.subsystemNQN").MaxLength; got != export.MaxNQNLength {
		t.Errorf("spec.export.subsystemNQN maxLength %d, api/export allows %d", got, export.MaxNQNLength)
	}
}

// The CRDs must install on every Kubernetes release the project supports.
// CEL functions and rule fields newer than 1.25 make an older API server
// refuse the CRD (an unknown function fails compilation) or make strict
// clients refuse it (an unknown field), so none may appear.
func TestCRDsUseOnlyKubernetes125Validation(t *testing.T) {
	newer := []string{
		"isIP(", "ip(", "cidr(", "isCIDR(", "quantity(", "isQuantity(", "format.", "semver(",
		"isSemver(", ".ip()", "url(", "isURL(", "authorizer", "optional", ".?",
	}
	var walk func(name, path string, s apiextensionsv1.JSONSchemaProps)
	walk = func(name, path string, s apiextensionsv1.JSONSchemaProps) {
		for _, v := range s.XValidations {
			if v.MessageExpression != "" || v.Reason != nil || v.FieldPath != "" || v.OptionalOldSelf != nil {
				t.Errorf("%s %s: rule %q uses messageExpression, reason, fieldPath or optionalOldSelf (newer than Kubernetes 1.25)", name, path, v.Rule)
			}
			if v.Message == "" {
				t.Errorf("%s %s: rule %q has no message", name, path, v.Rule)
			}
			for _, f := range newer {
				if strings.Contains(v.Rule, f) {
					t.Errorf("%s %s: rule %q uses %q, newer than Kubernetes 1.25", name, path, v.Rule, f)
				}
			}
		}
		for p, sub := range s.Properties {
			walk(name, path+"."+p, sub)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(name, path+"[]", *s.Items.Schema)
		}
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			walk(name, path+"{}", *s.AdditionalProperties.Schema)
		}
	}
	files, err := filepath.Glob(filepath.Join("config", "crd", "*.yaml"))
	if err != nil || len(files) != 6 {
		t.Fatalf("config/crd: %v, %v; want the 6 CRDs", files, err)
	}
	for _, f := range files {
		plural := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "pillar-csi.io_"), ".yaml")
		crd := loadCRD(t, plural)
		walk(crd.Name, "", *crd.Spec.Versions[0].Schema.OpenAPIV3Schema)
	}
}
