package node

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// Default locations of the host identity, as nvme-cli keeps them.
const (
	DefaultHostNQNFile = "/etc/nvme/hostnqn"
	DefaultHostIDFile  = "/etc/nvme/hostid"
)

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ReadHostIdentity reads and validates the host NQN and host ID files. The
// host ID file may be absent (the kernel then derives one); the host NQN
// file may not.
func ReadHostIdentity(nqnFile, idFile string) (hostNQN, hostID string, err error) {
	b, err := os.ReadFile(nqnFile)
	if err != nil {
		return "", "", fmt.Errorf("host NQN: %w (create it on the host with: nvme gen-hostnqn > %s)", err, nqnFile)
	}
	hostNQN = strings.TrimSpace(string(b))
	if err := export.ValidateNQN(hostNQN); err != nil {
		return "", "", fmt.Errorf("host NQN in %s: %w", nqnFile, err)
	}
	b, err = os.ReadFile(idFile)
	if os.IsNotExist(err) {
		return hostNQN, "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("host ID: %w", err)
	}
	hostID = strings.TrimSpace(string(b))
	if !uuidRE.MatchString(hostID) {
		return "", "", fmt.Errorf("host ID in %s: %q is not a UUID", idFile, hostID)
	}
	return hostNQN, hostID, nil
}
