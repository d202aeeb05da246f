package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// GetAgentInfo reports the agent's version, node, what it can do now, and
// the instance and boot IDs by which the controller notices a restart or a
// reboot. Capabilities are probed on every call (a module loaded after the
// agent started counts): a backend needs its tool on PATH and its kernel
// module, NVMe-oF/TCP needs nvmet_tcp and the nvmet configfs tree.
func (s *Server) GetAgentInfo(ctx context.Context, _ *agentv1.GetAgentInfoRequest) (*agentv1.GetAgentInfoResponse, error) {
	resp := &agentv1.GetAgentInfoResponse{AgentVersion: s.cfg.Version, NodeName: s.cfg.NodeName,
		InstanceId: s.instanceID, BootId: readBootID(s.cfg.ProcRoot), ExportsRestored: s.ExportsRestored(), MarksStoreId: s.marks.ID()}
	module := func(name string) bool {
		_, err := os.Stat(filepath.Join(s.cfg.SysfsRoot, "module", name))
		return err == nil
	}
	tool := func(name string) bool {
		_, err := exec.LookPath(name)
		return err == nil
	}
	if tool("zfs") && tool("zpool") && module("zfs") {
		resp.Capabilities = append(resp.Capabilities, agentv1.Capability_CAPABILITY_BACKEND_ZFS)
	}
	if tool("lvm") && module("dm_mod") {
		resp.Capabilities = append(resp.Capabilities, agentv1.Capability_CAPABILITY_BACKEND_LVM)
		if module("dm_thin_pool") {
			resp.Capabilities = append(resp.Capabilities, agentv1.Capability_CAPABILITY_BACKEND_LVM_THIN)
		}
	}
	if _, err := os.Stat(filepath.Join(s.cfg.ConfigfsRoot, "nvmet")); err == nil && module("nvmet_tcp") {
		resp.Capabilities = append(resp.Capabilities, agentv1.Capability_CAPABILITY_TRANSPORT_NVMEOF_TCP)
	}
	// The RPCs are served; each store says whether it can (linear LVM
	// cannot, and says so).
	resp.Capabilities = append(resp.Capabilities, agentv1.Capability_CAPABILITY_SNAPSHOTS)
	return resp, nil
}

// newInstanceID draws a random UUID (version 4) for this process.
func newInstanceID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}

// readBootID returns the kernel's boot ID, or "" when it cannot be read
// (the field is then empty, as from an older agent).
func readBootID(procRoot string) string {
	b, err := os.ReadFile(filepath.Join(procRoot, "sys", "kernel", "random", "boot_id"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
