package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// AttachState is what another process in the same guest needs to use a
// cluster it did not start (Attach): where its credentials, binaries and
// state are, and what Start learnt on the way (the node's address, the
// images imported). A kept cluster (make e2e-up) writes it once its
// cluster is up; each test binary that make e2e-run hands the guest
// attaches to it instead of starting a cluster of its own.
type AttachState struct {
	NodeName   string   `json:"nodeName"`
	NodeIP     string   `json:"nodeIP"`
	PeerName   string   `json:"peerName,omitempty"`
	PeerIP     string   `json:"peerIP,omitempty"`
	Kubeconfig string   `json:"kubeconfig"`
	BinDir     string   `json:"binDir"`
	ImageDir   string   `json:"imageDir"`
	StateDir   string   `json:"stateDir"`
	PauseImage string   `json:"pauseImage"`
	Images     []string `json:"images"`
	// BusyboxApplets spares each attaching binary asking the host
	// busybox again (seconds under TCG); Import* build images from them.
	BusyboxApplets []string `json:"busyboxApplets"`
	Registry       string   `json:"registry,omitempty"`
	RegistryCA     string   `json:"registryCA,omitempty"`
}

// AttachState returns the state Attach rebuilds the cluster from.
func (c *Cluster) AttachState() AttachState {
	return AttachState{
		NodeName: c.NodeName, NodeIP: c.NodeIP, PeerName: c.PeerName, PeerIP: c.PeerIP,
		Kubeconfig: c.Kubeconfig,
		BinDir:     c.opts.BinDir, ImageDir: c.opts.ImageDir, StateDir: c.opts.StateDir,
		PauseImage: c.PauseImage, Images: slices.Clone(c.Images),
		BusyboxApplets: slices.Clone(c.busyboxApplets),
		Registry:       c.Registry, RegistryCA: c.RegistryCA,
	}
}

// WriteAttachState writes c's AttachState to path, atomically: a test
// binary started while it is written must see all of it or none.
func (c *Cluster) WriteAttachState(path string) error {
	b, err := json.MarshalIndent(c.AttachState(), "", "  ")
	if err != nil {
		return fmt.Errorf("write the attach state: %w", err)
	}
	if err := guest.WriteFileAtomic(path, append(b, '\n')); err != nil {
		return fmt.Errorf("write the attach state: %w", err)
	}
	return nil
}

// ReadAttachState reads what WriteAttachState wrote.
func ReadAttachState(path string) (AttachState, error) {
	var s AttachState
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("read the attach state: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("read the attach state %s: %w", path, err)
	}
	switch {
	case s.Kubeconfig == "":
		return s, fmt.Errorf("read the attach state %s: no kubeconfig", path)
	case s.NodeName == "" || s.NodeIP == "":
		return s, fmt.Errorf("read the attach state %s: no node name or address", path)
	case s.BinDir == "" || s.StateDir == "":
		return s, fmt.Errorf("read the attach state %s: no bin or state directory", path)
	}
	return s, nil
}

// ErrAttached is the error of what only the process that started the
// cluster can do: it alone holds the components' processes.
var ErrAttached = errors.New("the cluster was attached to, not started, by this process")

// Attach returns the cluster another process in this guest started and
// described in the attach state file at path (WriteAttachState). The
// cluster is used, never owned: Stop leaves it running, and StopKubelet
// and StartKubelet, which need the kubelet's process, fail with
// ErrAttached. Dump reads the components' logs from the state directory.
func Attach(path string, log io.Writer) (*Cluster, error) {
	s, err := ReadAttachState(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(s.Kubeconfig); err != nil {
		return nil, fmt.Errorf("attach to the cluster of %s: %w (did the guest that kept it reboot?)", path, err)
	}
	if log == nil {
		log = os.Stderr
	}
	c := &Cluster{
		opts:     Options{BinDir: s.BinDir, ImageDir: s.ImageDir, StateDir: s.StateDir, NodeName: s.NodeName, PeerName: s.PeerName, Log: log},
		NodeName: s.NodeName, NodeIP: s.NodeIP, PeerName: s.PeerName, PeerIP: s.PeerIP,
		Kubeconfig: s.Kubeconfig, PauseImage: s.PauseImage, Images: s.Images,
		Registry: s.Registry, RegistryCA: s.RegistryCA,
		busyboxApplets: s.BusyboxApplets,
		attached:       true,
	}
	if c.PeerName != "" {
		c.joinDir = filepath.Join(guest.ShareDir, "join")
	}
	return c, nil
}

// Attached reports whether c came from Attach.
func (c *Cluster) Attached() bool { return c.attached }

// dumpLogs writes the tail of every component's log in the state
// directory: an attached cluster has no daemon handles to ask.
func (c *Cluster) dumpLogs(w io.Writer) {
	logs, _ := filepath.Glob(c.dir("logs", "*.log"))
	for _, l := range logs {
		fmt.Fprintf(w, "---- %s ----\n%s\n", l, TailFile(l, 16<<10))
	}
}
