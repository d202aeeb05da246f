// Command refgen writes the reference of pillar-controller's own metrics
// (docs/reference/pillar-controller-metrics.md) from the collectors the
// binary registers beside controller-runtime's. make generate runs it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/pillar-csi/pillar-csi/api/metricsdoc"
	"github.com/pillar-csi/pillar-csi/api/v1alpha1"
	"github.com/pillar-csi/pillar-csi/csidriver/controller"
	"github.com/pillar-csi/pillar-csi/csidriver/reconcile"
)

func main() {
	out := flag.String("o", "", "file to write (required)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "refgen: -o is required")
		os.Exit(2)
	}
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
}

func write(out string) error {
	// The same constructors controllerapp calls, with a recorder for a
	// registry and an empty fake API for the volume count.
	var rec metricsdoc.Recorder
	if _, err := reconcile.NewMetrics(&rec, "v"); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if _, err := controller.NewMetrics(&rec, fake.NewClientBuilder().WithScheme(scheme).Build()); err != nil {
		return err
	}
	ms, err := metricsdoc.Describe(rec.Collectors...)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := metricsdoc.Write(&b, "pillar-controller", ms); err != nil {
		return err
	}
	b.WriteString("pillar-controller serves these beside controller-runtime's own metrics (`controller_runtime_*`, `workqueue_*`, `rest_client_*`, `leader_election_*`) and the Go runtime's and the process's (`go_*`, `process_*`).\n")
	return os.WriteFile(out, b.Bytes(), 0o644)
}
