package app_test

import (
	"fmt"

	"github.com/pillar-csi/pillar-csi/agent/app"
)

// The flags of a storage node with mutual TLS from a mounted Secret; the
// node name comes from the environment, as the DaemonSet sets it.
func ExampleParseFlags() {
	env := map[string]string{"NODE_NAME": "storage-1"}
	opts, err := app.ParseFlags([]string{
		"-tls-cert-file", "/etc/pillar-agent/tls/tls.crt",
		"-tls-key-file", "/etc/pillar-agent/tls/tls.key",
		"-tls-ca-file", "/etc/pillar-agent/tls/ca.crt",
	}, func(k string) string { return env[k] }, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(opts.NodeName, opts.ListenAddress, opts.MetricsAddress, opts.TLSEnabled())

	// Two of the three TLS files are an error that names the third.
	_, err = app.ParseFlags([]string{"-node-name", "storage-1",
		"-tls-cert-file", "/etc/pillar-agent/tls/tls.crt", "-tls-key-file", "/etc/pillar-agent/tls/tls.key"}, nil, nil)
	fmt.Println(err)
	// Output:
	// storage-1 :9420 :9421 true
	// -tls-cert-file, -tls-key-file and -tls-ca-file go together: -tls-ca-file missing
}
