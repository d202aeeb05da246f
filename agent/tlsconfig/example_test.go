package tlsconfig_test

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/pillar-csi/pillar-csi/agent/tlsconfig"
)

// A server whose certificate, key and client CA come from a Secret mounted
// at /etc/pillar-agent/tls. The files may be replaced at any time.
func Example() {
	r, err := tlsconfig.New(tlsconfig.Files{
		CertFile: "/etc/pillar-agent/tls/tls.crt",
		KeyFile:  "/etc/pillar-agent/tls/tls.key",
		CAFile:   "/etc/pillar-agent/tls/ca.crt",
	}, tlsconfig.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		// No such Secret here: the error names the file and what is wrong.
		fmt.Println(err)
		return
	}
	// Hand the config to the server, e.g. credentials.NewTLS(cfg) for gRPC.
	cfg := r.ServerConfig()
	_ = cfg
	// Output: read /etc/pillar-agent/tls/tls.crt: no such file or directory
}
