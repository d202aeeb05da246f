package server

import (
	"context"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/configfs"
)

// nvmet is the part of *configfs.FS the agent uses. The agent always runs
// on a configfs.FS; unit tests substitute a model, because a plain
// directory does not behave like configfs (mkdir creates no attributes).
type nvmet interface {
	Apply(ctx context.Context, e configfs.Export) error
	Remove(ctx context.Context, nqn string) error
	Read(ctx context.Context) (*configfs.State, error)
	ReadSubsystem(ctx context.Context, nqn string) (configfs.Subsystem, bool, error)
	ReadExport(ctx context.Context, nqn string) (configfs.Export, bool, error)
	RevalidateSize(ctx context.Context, nqn string, nsid uint32) error
	Linked(ctx context.Context) (map[string]int, error)
}

var _ nvmet = (*configfs.FS)(nil)

// ownedVolumeID returns the volume of a pillar-owned subsystem. Ownership
// is the NQN: pillar-csi creates subsystems only under
// export.SubsystemNQNPrefix followed by a valid volume ID, and never
// touches any other.
func ownedVolumeID(nqn string) (string, bool) {
	return export.VolumeIDFromNQN(nqn)
}
