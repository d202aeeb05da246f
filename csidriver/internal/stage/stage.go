// Package stage keeps pillar-node's stage records: what NodeStageVolume
// did for one volume, written under the node's state directory
// (/var/lib/pillar-csi/node) so that NodeUnstageVolume — which receives
// neither the volume capability nor the volume context — and the other
// node RPCs can find the volume's controller, device and mount again,
// after a plugin restart too.
//
// A record is one JSON file per volume, <dir>/<volume-id>.json, written
// atomically with renameio: temporary file in the same directory, fsync,
// rename, fsync of the directory. A reader therefore sees the old record or
// the new one, never a torn write, even after a power cut.
package stage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// Version is the record format this package writes and reads.
const Version = 1

// AccessType is how a volume is staged.
type AccessType string

const (
	Mount AccessType = "mount" // a filesystem mounted at the staging path
	Block AccessType = "block" // the raw block device
)

// Record is the stage record of one volume. Every field unstage and the
// other RPCs need is here, because they get no volume context.
type Record struct {
	Version  int    `json:"version"`
	VolumeID string `json:"volumeID"`

	// Where and how the volume was connected.
	SubsystemNQN string `json:"subsystemNQN"`
	Transport    string `json:"transport"`
	Address      string `json:"address"`
	Port         uint16 `json:"port"`
	HostNQN      string `json:"hostNQN"`
	// Controller is the controller NodeStage connected or reused
	// (nvmeN); informational, since names change on reconnect.
	Controller string `json:"controller,omitempty"`

	// The namespace identifiers the device is found by.
	UUID  string `json:"uuid"`
	NGUID string `json:"nguid"`

	AccessType  AccessType `json:"accessType"`
	FsType      string     `json:"fsType,omitempty"`
	MountFlags  []string   `json:"mountFlags,omitempty"`
	ReadOnly    bool       `json:"readOnly,omitempty"`
	StagingPath string     `json:"stagingPath"`

	// Complete is false while NodeStage is still working: the record is
	// written before the connect, so that an interrupted stage can be
	// unstaged.
	Complete bool `json:"complete"`
}

// Error is a failed operation on a record file.
type Error struct {
	Op   string // "read", "write", "remove", "decode"
	Path string
	Err  error
}

func (e *Error) Error() string { return "stage record " + e.Op + " " + e.Path + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ErrCorrupt is wrapped when a record file exists but cannot be
// understood: it is never silently ignored, because the volume may still be
// connected and mounted.
var ErrCorrupt = errors.New("corrupt stage record")

// Store is a directory of stage records. Records of different volumes may
// be used concurrently; callers serialise work on one volume.
type Store struct {
	dir string
}

// NewStore returns the store in dir, creating dir (0700) if needed.
func NewStore(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, &Error{Op: "open", Path: dir, Err: errors.New("state directory must be an absolute path")}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, &Error{Op: "open", Path: dir, Err: err}
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the record file of a volume. The volume ID must be valid
// (export.ValidateVolumeID), which also makes it a safe file name.
func (s *Store) Path(volumeID string) string { return filepath.Join(s.dir, volumeID+".json") }

// Get returns the record of volumeID; ok is false when there is none.
func (s *Store) Get(volumeID string) (r Record, ok bool, err error) {
	if err := export.ValidateVolumeID(volumeID); err != nil {
		return Record{}, false, &Error{Op: "read", Path: volumeID, Err: err}
	}
	p := s.Path(volumeID)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, &Error{Op: "read", Path: p, Err: err}
	}
	r, err = decode(volumeID, b)
	if err != nil {
		return Record{}, false, &Error{Op: "decode", Path: p, Err: err}
	}
	return r, true, nil
}

// decode parses the content of volumeID's record file. The error wraps
// ErrCorrupt.
func decode(volumeID string, b []byte) (Record, error) {
	var r Record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	// Decode stops after the first JSON value; a file is one record and
	// nothing else (Put writes a newline after it), or it is not a file
	// Put wrote.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Record{}, fmt.Errorf("%w: data after the record", ErrCorrupt)
	}
	if err := r.validate(volumeID); err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return r, nil
}

// validate accepts only a record NodeStage could have written for
// volumeID. Unstage disconnects the record's subsystem, so a record that
// names another volume's subsystem (or namespace) is corrupt, whatever
// else it says: acting on it would tear down another volume.
func (r Record) validate(volumeID string) error {
	id, err := export.For(volumeID)
	switch {
	case r.Version != Version:
		return fmt.Errorf("version %d, this pillar-node reads version %d", r.Version, Version)
	case r.VolumeID != volumeID:
		return fmt.Errorf("record of volume %q in the file of volume %q", r.VolumeID, volumeID)
	case err != nil:
		return err
	case r.SubsystemNQN != id.SubsystemNQN:
		return fmt.Errorf("subsystem NQN %q is not volume %s's %q", r.SubsystemNQN, volumeID, id.SubsystemNQN)
	case r.UUID != id.UUID || r.NGUID != id.NGUID:
		return fmt.Errorf("namespace UUID %q and NGUID %q are not volume %s's %q and %q", r.UUID, r.NGUID, volumeID, id.UUID, id.NGUID)
	case r.Transport != export.TransportTCP:
		return fmt.Errorf("transport %q", r.Transport)
	case !canonicalAddr(r.Address):
		return fmt.Errorf("target address %q is not an IP address as NodeStage writes it", r.Address)
	case r.Port == 0:
		return errors.New("target port 0")
	case r.AccessType != Mount && r.AccessType != Block:
		return fmt.Errorf("access type %q", r.AccessType)
	case !filepath.IsAbs(r.StagingPath):
		return fmt.Errorf("staging path %q is not absolute", r.StagingPath)
	}
	return nil
}

// canonicalAddr reports whether s is an IP address in the form
// netip.Addr.String gives, which is how NodeStage records it.
func canonicalAddr(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.String() == s
}

// Put writes r atomically, replacing any previous record of the volume.
func (s *Store) Put(r Record) error {
	r.Version = Version
	if err := export.ValidateVolumeID(r.VolumeID); err != nil {
		return &Error{Op: "write", Path: r.VolumeID, Err: err}
	}
	p := s.Path(r.VolumeID)
	if err := r.validate(r.VolumeID); err != nil {
		return &Error{Op: "write", Path: p, Err: err}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return &Error{Op: "write", Path: p, Err: err}
	}
	// renameio.WriteFile: temp file in dir, fsync, rename, fsync dir.
	if err := renameio.WriteFile(p, append(b, '\n'), 0o600); err != nil {
		return &Error{Op: "write", Path: p, Err: err}
	}
	return nil
}

// Delete removes the record of volumeID; a missing record is not an
// error. The directory is synced so that the removal survives a crash.
func (s *Store) Delete(volumeID string) error {
	p := s.Path(volumeID)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return &Error{Op: "remove", Path: p, Err: err}
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return &Error{Op: "remove", Path: s.dir, Err: err}
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return &Error{Op: "remove", Path: s.dir, Err: err}
	}
	return nil
}
