package cluster

import (
	"encoding/base64"
	"fmt"
)

// containerdConfig is containerd 1.6's configuration (version 2) for the
// lab node: the CRI plugin with a locally imported sandbox image, overlayfs
// snapshots, runc with cgroupfs (the kubelet's cgroupDriver), no AppArmor
// (the guest kernel has no profiles loaded) and Debian's CNI plugins.
// The snapshotters and runtimes the guest cannot use are disabled so that
// their failures do not bury real errors in the log.
//
// registryConfigPath, if not empty, is where containerd finds a hosts.toml
// per registry host (the lab registry's, with its CA), as a user
// configures a private registry.
func containerdConfig(sandboxImage, cniConfDir, registryConfigPath string) string {
	registry := ""
	if registryConfigPath != "" {
		registry = fmt.Sprintf(`  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, registryConfigPath)
	}
	return fmt.Sprintf(`version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  disable_apparmor = true
  enable_unprivileged_ports = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
%s`, sandboxImage, cniConfDir, registry)
}

// cniConfig is a bridge network with host-local addresses from PodCIDR;
// pods reach the node (and through kube-proxy's rules, Services) by the
// bridge's gateway address.
func cniConfig(podCIDR string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "pillar-lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, bridgeName, podCIDR)
}

// kubeletConfig is the kubelet's configuration file. Eviction and image
// garbage collection are kept out of the way: the node's filesystems are
// small tmpfs mounts, and a suite must not lose its pods to a threshold.
func kubeletConfig(caFile, nodeIP string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
clusterDomain: cluster.local
failSwapOn: false
address: %s
healthzBindAddress: 127.0.0.1
resolvConf: ""
evictionHard: {memory.available: "1Mi", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
maxPods: 110
`, caFile, nodeIP)
}

// kubeProxyConfig runs kube-proxy in iptables mode without touching
// conntrack sysctls (the guest's defaults are fine, and a read-only
// /sys/module parameter would fail the start).
func kubeProxyConfig(kubeconfig, nodeName, nodeIP string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %q}
hostnameOverride: %q
clusterCIDR: %q
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, nodeName, clusterCIDR, nodeIP)
}

// kubeconfig is a client configuration for the API server with a client
// certificate, embedded so that the file is all a client needs.
func kubeconfig(server string, caPEM []byte, kp keyPair, user string) string {
	b := base64.StdEncoding.EncodeToString
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: pillar-lab
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: pillar-lab
  context: {cluster: pillar-lab, user: %s}
current-context: pillar-lab
`, server, b(caPEM), user, b(kp.cert), b(kp.key), user)
}
