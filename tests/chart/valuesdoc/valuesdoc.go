// Package valuesdoc makes the values table of a Helm chart's README from the
// chart's values.yaml and values.schema.json, so the table cannot drift from
// the values: every key's description is the comment above it in
// values.yaml, its type comes from the schema, its default is the value
// itself.
//
// A mapping with a comment above it is a row of its own (nodeSelector,
// resources, ...); one without is a section whose keys are rows. A key without a comment, or one the schema does not know, is an
// error: the point of the table is that every value is documented.
package valuesdoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// The README region the table replaces, markers included.
const (
	BeginMarker = "<!-- values:begin -->"
	EndMarker   = "<!-- values:end -->"
)

// Row is one documented value.
type Row struct {
	Key         string
	Type        string
	Default     string
	Description string
}

// Rows reads values.yaml and values.schema.json and returns a row per
// value, in the order of values.yaml.
func Rows(values, schema []byte) ([]Row, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml: not a mapping")
	}
	var rows []Row
	if err := walk(doc.Content[0], s, "", &rows); err != nil {
		return nil, err
	}
	return rows, nil
}

func walk(m *yaml.Node, schema map[string]any, prefix string, rows *[]Row) error {
	props, _ := schema["properties"].(map[string]any)
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		path := prefix + k.Value
		sub, ok := props[k.Value].(map[string]any)
		if !ok {
			return fmt.Errorf("values.yaml: %s is not in values.schema.json", path)
		}
		if v.Kind == yaml.MappingNode && k.HeadComment == "" {
			if err := walk(v, sub, path+".", rows); err != nil {
				return err
			}
			continue
		}
		desc := comment(k.HeadComment)
		if desc == "" {
			return fmt.Errorf("values.yaml: %s has no comment above it", path)
		}
		def, err := compact(v)
		if err != nil {
			return fmt.Errorf("values.yaml: %s: %w", path, err)
		}
		*rows = append(*rows, Row{Key: path, Type: typeOf(sub), Default: def, Description: desc})
	}
	return nil
}

// comment joins the lines of a head comment into one paragraph; a blank
// line separates the comment of a section from that of its first key, and
// only the part nearest the key belongs to it.
func comment(c string) string {
	paras := strings.Split(strings.TrimSpace(c), "\n\n")
	var words []string
	for _, line := range strings.Split(paras[len(paras)-1], "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			words = append(words, line)
		}
	}
	return strings.Join(words, " ")
}

func typeOf(schema map[string]any) string {
	switch t := schema["type"].(type) {
	case string:
		if enum, ok := schema["enum"].([]any); ok {
			var vs []string
			for _, e := range enum {
				vs = append(vs, fmt.Sprint(e))
			}
			return strings.Join(vs, " \\| ")
		}
		return t
	case []any:
		var ts []string
		for _, e := range t {
			ts = append(ts, fmt.Sprint(e))
		}
		sort.Strings(ts)
		return strings.Join(ts, " \\| ")
	}
	return "any"
}

func compact(v *yaml.Node) (string, error) {
	var x any
	if err := v.Decode(&x); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return "", err
	}
	return strings.TrimSpace(buf.String()), nil
}

// Table renders rows as a Markdown table.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", r.Key, r.Type, cell(r.Default), cell(r.Description))
	}
	return b.String()
}

// cell escapes what Markdown would read as a column break or an HTML tag.
func cell(s string) string {
	return strings.NewReplacer("|", "\\|", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Update returns readme with the region between the markers replaced by
// table.
func Update(readme []byte, table string) ([]byte, error) {
	s := string(readme)
	begin := strings.Index(s, BeginMarker)
	end := strings.Index(s, EndMarker)
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("README.md: no %s ... %s region", BeginMarker, EndMarker)
	}
	return []byte(s[:begin] + BeginMarker + "\n" + table + s[end:]), nil
}
