// Command refgen writes the reference of pillar-agent's metrics
// (docs/reference/pillar-agent-metrics.md) from the collectors
// metrics.New registers. make generate runs it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/pillar-csi/pillar-csi/agent/internal/metrics"
	"github.com/pillar-csi/pillar-csi/api/metricsdoc"
)

func main() {
	out := flag.String("o", "", "file to write (required)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "refgen: -o is required")
		os.Exit(2)
	}
	// Every optional metric on, as in the binary with TLS.
	m := metrics.New(metrics.Config{
		Version: "v", NodeName: "n",
		Stats:               func() (int, int) { return 0, 0 },
		CertificateNotAfter: time.Now,
		ExportsRestored:     func() uint64 { return 0 },
	})
	ms, err := metricsdoc.Describe(m.Collectors()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
	var b bytes.Buffer
	if err := metricsdoc.Write(&b, "pillar-agent", ms, metrics.Namespace+"_"); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
}
