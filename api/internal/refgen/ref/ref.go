// Package ref renders the generated references of docs/reference: the
// condition and event reasons of api/v1alpha1 and the fields of the CRDs.
package ref

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// reasonDoc matches a reason constant's comment: its name, an optional
// event type in parentheses, a colon, and the meaning.
var reasonDoc = regexp.MustCompile(`^(Reason[A-Za-z]+)(?: \((Normal|Warning)\))?: (?s)(.+)$`)

// Reasons writes the reference of the reason constants in the Go file src:
// one section per const block, named by the block's comment, with each
// constant's value and meaning. A constant without a comment in the
// expected form is an error, so that no reason goes undocumented.
func Reasons(w io.Writer, src string) error {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, src, nil, parser.ParseComments)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# Condition and event reasons\n\n" +
		"<!-- Generated from api/v1alpha1/reasons.go by `make generate`; do not edit. -->\n\n" +
		"Every reason pillar-controller writes into a condition (`kubectl get` and\n" +
		"`kubectl describe` of a Pillar object) or an event (`kubectl get events`,\n" +
		"`kubectl describe` of the object or of a claim), with what it means and\n" +
		"what to do. A Ready condition's change to False comes with a Warning\n" +
		"event of the same reason, a change to True with a Normal one.\n" +
		"[troubleshooting.md](../troubleshooting.md) starts from the symptoms.\n")
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		title := strings.TrimSuffix(strings.TrimSpace(g.Doc.Text()), ".")
		if title == "" {
			return fmt.Errorf("%s: a const block without a comment naming where its reasons appear", fset.Position(g.Pos()))
		}
		fmt.Fprintf(&b, "\n## %s\n\n| reason | event | meaning |\n|---|---|---|\n", oneLine(title))
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if len(v.Names) != 1 || len(v.Values) != 1 {
				return fmt.Errorf("%s: one reason per line", fset.Position(v.Pos()))
			}
			lit, ok := v.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return fmt.Errorf("%s: %s is not a string literal", fset.Position(v.Pos()), v.Names[0].Name)
			}
			m := reasonDoc.FindStringSubmatch(strings.TrimSpace(v.Doc.Text()))
			if m == nil || m[1] != v.Names[0].Name {
				return fmt.Errorf("%s: %s needs a comment \"%s: meaning\" or \"%s (Normal|Warning): meaning\"",
					fset.Position(v.Pos()), v.Names[0].Name, v.Names[0].Name, v.Names[0].Name)
			}
			event := m[2]
			if event == "" {
				event = "with the condition"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.Trim(lit.Value, "`\""), event, cell(m[3]))
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("%s: no reason constants", src)
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// CRDs writes the reference of the CustomResourceDefinitions in files: per
// kind its names, scope, columns and every field with type, constraints
// and description.
func CRDs(w io.Writer, files []string) error {
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var c apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &c); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		crds = append(crds, c)
	}
	if len(crds) == 0 {
		return fmt.Errorf("no CRD manifests")
	}
	slices.SortFunc(crds, func(a, b apiextensionsv1.CustomResourceDefinition) int {
		return strings.Compare(a.Spec.Names.Kind, b.Spec.Names.Kind)
	})
	var b strings.Builder
	b.WriteString("# Custom resources\n\n" +
		"<!-- Generated from the CRD manifests of api/config/crd by `make generate`; do not edit. -->\n\n" +
		"The fields of every pillar-csi resource, as the API server validates\n" +
		"them. The Go types in `api/v1alpha1` are their source; the examples in\n" +
		"[deploy/examples](../../deploy/examples/README.md) show them in use.\n\nKinds:")
	for _, c := range crds {
		fmt.Fprintf(&b, " [%s](#%s)", c.Spec.Names.Kind, strings.ToLower(c.Spec.Names.Kind))
	}
	b.WriteString(".\n")
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			writeCRD(&b, &c, &v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCRD(b *strings.Builder, c *apiextensionsv1.CustomResourceDefinition, v *apiextensionsv1.CustomResourceDefinitionVersion) {
	n := c.Spec.Names
	fmt.Fprintf(b, "\n## %s\n\n`%s`, version `%s`, %s", n.Kind, c.Name, v.Name, map[apiextensionsv1.ResourceScope]string{
		apiextensionsv1.ClusterScoped: "cluster-scoped", apiextensionsv1.NamespaceScoped: "namespaced"}[c.Spec.Scope])
	if len(n.ShortNames) > 0 {
		fmt.Fprintf(b, "; short names %s", codeList(n.ShortNames))
	}
	if len(n.Categories) > 0 {
		fmt.Fprintf(b, "; categories %s", codeList(n.Categories))
	}
	b.WriteString(".\n")
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return
	}
	root := v.Schema.OpenAPIV3Schema
	if root.Description != "" {
		fmt.Fprintf(b, "\n%s\n", strings.TrimSpace(root.Description))
	}
	if len(v.AdditionalPrinterColumns) > 0 {
		b.WriteString("\nColumns of `kubectl get`")
		var cols []string
		for _, col := range v.AdditionalPrinterColumns {
			s := fmt.Sprintf("%s (`%s`", col.Name, col.JSONPath)
			if col.Priority > 0 {
				s += ", with `-o wide`"
			}
			cols = append(cols, s+")")
		}
		fmt.Fprintf(b, ": %s.\n", strings.Join(cols, ", "))
	}
	for _, rule := range root.XValidations {
		fmt.Fprintf(b, "\nRule: %s\n", oneLine(ruleText(rule)))
	}
	b.WriteString("\n| field | type | description |\n|---|---|---|\n")
	for _, name := range []string{"spec", "status"} {
		if p, ok := root.Properties[name]; ok {
			writeFields(b, name, &p, slices.Contains(root.Required, name))
		}
	}
}

// writeFields writes the row of field path and, in order, its children.
func writeFields(b *strings.Builder, path string, p *apiextensionsv1.JSONSchemaProps, required bool) {
	if isConditions(p) {
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", path, "array of Condition", cell(strings.TrimSpace(p.Description)+
			" Kubernetes conditions (type, status, reason, message, lastTransitionTime, observedGeneration); the reasons: [reasons.md](reasons.md)."))
		return
	}
	fmt.Fprintf(b, "| `%s` | %s | %s |\n", path, typeOf(p, required), cell(describe(p)))
	for _, name := range sortedKeys(p.Properties) {
		child := p.Properties[name]
		writeFields(b, path+"."+name, &child, slices.Contains(p.Required, name))
	}
	if p.Items != nil && p.Items.Schema != nil && len(p.Items.Schema.Properties) > 0 {
		for _, name := range sortedKeys(p.Items.Schema.Properties) {
			child := p.Items.Schema.Properties[name]
			writeFields(b, path+"[]."+name, &child, slices.Contains(p.Items.Schema.Required, name))
		}
	}
	if ap := p.AdditionalProperties; ap != nil && ap.Schema != nil && len(ap.Schema.Properties) > 0 {
		for _, name := range sortedKeys(ap.Schema.Properties) {
			child := ap.Schema.Properties[name]
			writeFields(b, path+".<key>."+name, &child, slices.Contains(ap.Schema.Required, name))
		}
	}
}

// isConditions reports whether p is a list of metav1.Condition, whose
// fields every Kubernetes user knows.
func isConditions(p *apiextensionsv1.JSONSchemaProps) bool {
	if p.Items == nil || p.Items.Schema == nil {
		return false
	}
	_, reason := p.Items.Schema.Properties["reason"]
	_, transition := p.Items.Schema.Properties["lastTransitionTime"]
	return reason && transition
}

// typeOf is the type column: the type, and whether the field is required.
func typeOf(p *apiextensionsv1.JSONSchemaProps, required bool) string {
	t := p.Type
	switch {
	case t == "array" && p.Items != nil && p.Items.Schema != nil:
		t = "array of " + p.Items.Schema.Type
	case t == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil:
		t = "map of " + p.AdditionalProperties.Schema.Type
	case t == "" && p.XIntOrString:
		t = "integer or string"
	}
	if p.Format != "" {
		t += " (" + p.Format + ")"
	}
	if required {
		t += ", required"
	}
	return t
}

// describe is the description column: the field's description and the
// constraints the API server checks.
func describe(p *apiextensionsv1.JSONSchemaProps) string {
	var parts []string
	if d := strings.TrimSpace(p.Description); d != "" {
		parts = append(parts, d)
	}
	if p.Default != nil {
		parts = append(parts, fmt.Sprintf("Default: `%s`.", string(p.Default.Raw)))
	}
	if len(p.Enum) > 0 {
		var vals []string
		for _, e := range p.Enum {
			vals = append(vals, "`"+strings.Trim(string(e.Raw), `"`)+"`")
		}
		parts = append(parts, "One of "+strings.Join(vals, ", ")+".")
	}
	if p.Minimum != nil || p.Maximum != nil {
		parts = append(parts, "Range: "+bound(p.Minimum)+" to "+bound(p.Maximum)+".")
	}
	if p.MinLength != nil || p.MaxLength != nil {
		parts = append(parts, fmt.Sprintf("Length: %s to %s.", count(p.MinLength), count(p.MaxLength)))
	}
	if p.MaxItems != nil {
		parts = append(parts, fmt.Sprintf("At most %d items.", *p.MaxItems))
	}
	for _, rule := range p.XValidations {
		parts = append(parts, "Rule: "+ruleText(rule))
	}
	return strings.Join(parts, " ")
}

// ruleText is a CEL rule as its message, or the rule when it has none.
func ruleText(r apiextensionsv1.ValidationRule) string {
	if r.Message != "" {
		return r.Message + "."
	}
	return "`" + r.Rule + "`."
}

func bound(f *float64) string {
	if f == nil {
		return "any"
	}
	return fmt.Sprint(*f)
}

func count(n *int64) string {
	if n == nil {
		return "any"
	}
	return fmt.Sprint(*n)
}

func sortedKeys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func codeList(s []string) string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = "`" + v + "`"
	}
	return strings.Join(out, ", ")
}

// oneLine joins the lines of s with spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cell is s on one line with the table's separator escaped.
func cell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}
