// Command refgen writes the references whose source of truth is the api
// module: the condition and event reasons (from v1alpha1/reasons.go, each
// constant's comment its meaning) and the fields of every CRD (from the
// manifests controller-gen writes to config/crd). `make generate` runs it
// (api/generate.go); `make verify` fails when its output is stale.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pillar-csi/pillar-csi/api/internal/refgen/ref"
)

func main() {
	reasons := flag.String("reasons", "", "write the reasons' reference to this file")
	crds := flag.String("crds", "", "write the CRDs' reference to this file")
	flag.Parse()
	if err := run(*reasons, *crds); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
}

func run(reasons, crds string) error {
	if reasons != "" {
		var b bytes.Buffer
		if err := ref.Reasons(&b, filepath.Join("v1alpha1", "reasons.go")); err != nil {
			return err
		}
		if err := os.WriteFile(reasons, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if crds != "" {
		files, err := filepath.Glob(filepath.Join("config", "crd", "*.yaml"))
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := ref.CRDs(&b, files); err != nil {
			return err
		}
		if err := os.WriteFile(crds, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
