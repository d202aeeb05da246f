package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// GetAgentInfo reports the agent's version, node and what it can do now.
// Capabilities are probed on every call (a module loaded after the agent
// started counts): a backend needs its tool on PATH and its kernel module,
// NVMe-oF/TCP needs nvmet_tcp and the nvmet configfs tree.
func (s *Server) GetAgentInfo(ctx context.Context, _ *agentv1.GetAgentInfoRequest) (*agentv1.GetAgentInfoResponse, error) {
	resp := &agentv1.GetAgentInfoResponse{AgentVersion: s.cfg.Version, NodeName: s.cfg.NodeName}
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
	return resp, nil
}
