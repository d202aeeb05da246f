package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RegistryPort is where the lab's registry listens, on the node's address.
const RegistryPort = "5000"

// The lab's private registry: the CNCF distribution registry (bin/registry,
// built by make cluster-tools from the Go module proxy), serving HTTPS on
// the node's address with a certificate of the cluster's CA, its storage
// on the guest's tmpfs. containerd is configured for it the way a user
// configures a private registry (a hosts.toml under its config_path that
// names the CA), and nothing of the chart is imported: the install pushes
// the images (make push) and the kubelet pulls them.
//
// Only a one-guest cluster has it; a two-guest run still imports the
// images into both guests.
//
// Who reaches it: whatever runs in the guest (the node and its pods), on
// the node's address, which exists only inside the guest; it asks no
// credential, which is what a lab needs and no product install should
// copy. TLS proves the registry to containerd and to the push, not the
// client to the registry.

// registryConfig is the registry's configuration (distribution v3).
func registryConfig(addr, root, crt, key string) string {
	return fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: false
http:
  addr: %s
  tls:
    certificate: %s
    key: %s
`, root, addr, crt, key)
}

// registryHosts is containerd's hosts.toml for the registry: HTTPS, the
// cluster's CA, pull and resolve only.
func registryHosts(host, ca string) string {
	return fmt.Sprintf(`server = "https://%s"

[host."https://%s"]
  capabilities = ["pull", "resolve"]
  ca = %q
`, host, host, ca)
}

// registryCertsDir is containerd's config_path: one directory per registry
// host, each with a hosts.toml.
func (c *Cluster) registryCertsDir() string { return c.dir("certs.d") }

// startRegistry writes the registry's certificate, configuration and
// containerd's hosts.toml for it, starts it and waits until it answers
// /v2/ over HTTPS with the cluster's CA.
func (c *Cluster) startRegistry(ctx context.Context) error {
	if _, err := os.Stat(c.bin("registry")); err != nil {
		return fmt.Errorf("%w (make cluster-tools builds it)", err)
	}
	pki := c.dir("pki")
	host := net.JoinHostPort(c.NodeIP, RegistryPort)
	kp, err := c.ca.issue("pillar-lab-registry", nil, []string{c.NodeIP})
	if err != nil {
		return err
	}
	crt, key, err := kp.write(pki, "registry")
	if err != nil {
		return err
	}
	data := c.dir("registry")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	cfg := c.dir("registry.yaml")
	if err := os.WriteFile(cfg, []byte(registryConfig(host, data, crt, key)), 0o644); err != nil {
		return err
	}
	hostDir := filepath.Join(c.registryCertsDir(), host)
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return err
	}
	ca := filepath.Join(pki, "ca.crt")
	if err := os.WriteFile(filepath.Join(hostDir, "hosts.toml"), []byte(registryHosts(host, ca)), 0o644); err != nil {
		return err
	}
	// Without a collector, its OpenTelemetry exporter would log a failed
	// export every few seconds.
	if _, err := c.startDaemon("registry", "/usr/bin/env", "OTEL_TRACES_EXPORTER=none", c.bin("registry"), "serve", cfg); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.ca.pem) {
		return errors.New("registry: the cluster's CA does not parse")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if err := c.waitFor(ctx, "the registry", 2*time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+host+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	c.Registry, c.RegistryCA = host, ca
	return nil
}

// RegistryRepository is where the install pushes the chart's images:
// the lab registry's pillar-csi path.
func (c *Cluster) RegistryRepository() string {
	if c.Registry == "" {
		return ""
	}
	return c.Registry + "/pillar-csi"
}

// ImagesFromRegistry returns, for every container of the pods in
// namespace, its name and where containerd got its image, and an error
// naming each one that was not pulled from the lab registry: an image the
// chart runs must never have been imported or come from elsewhere.
func (c *Cluster) ImagesFromRegistry(ctx context.Context, namespace string) ([]string, error) {
	// imageID is where containerd got the image: the repository digest
	// it pulled (an imported image has none of the registry's).
	out, err := c.Kubectl(ctx, nil, "get", "pods", "-n", namespace, "-o",
		`jsonpath={range .items[*]}{range .status.initContainerStatuses[*]}{.name}{" "}{.imageID}{"\n"}{end}{range .status.containerStatuses[*]}{.name}{" "}{.imageID}{"\n"}{end}{end}`)
	if err != nil {
		return nil, err
	}
	var seen, bad []string
	prefix := c.RegistryRepository() + "/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		seen = append(seen, line)
		if !strings.HasPrefix(f[1], prefix) || !strings.Contains(f[1], "@sha256:") {
			bad = append(bad, line)
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no container of namespace %s reports its image", namespace)
	}
	if len(bad) > 0 {
		return seen, fmt.Errorf("not pulled from the lab registry %s (container, imageID):\n  %s", c.Registry, strings.Join(bad, "\n  "))
	}
	return seen, nil
}
