// Command chart-docs rewrites the values table of the chart's README.md
// from values.yaml and values.schema.json (hack/chart-sync.sh runs it on
// make generate).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pillar-csi/pillar-csi/tests/chart/valuesdoc"
)

func main() {
	chart := flag.String("chart", "deploy/charts/pillar-csi", "directory of the chart")
	flag.Parse()
	if err := run(*chart); err != nil {
		fmt.Fprintln(os.Stderr, "chart-docs:", err)
		os.Exit(1)
	}
}

func run(chart string) error {
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return err
	}
	schema, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		return err
	}
	rows, err := valuesdoc.Rows(values, schema)
	if err != nil {
		return err
	}
	path := filepath.Join(chart, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := valuesdoc.Update(readme, valuesdoc.Table(rows))
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
