package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/configfs"
)

// fakeNvmet models the outcome of configfs.FS on a map: Apply stores the
// normalized export, Remove deletes it, Read lists them with ports shared
// by address. The configfs module proves the kernel rules; this model only
// has to let the server's logic be tested fast.
type fakeNvmet struct {
	mu          sync.Mutex
	exports     map[string]configfs.Export
	writes      int
	reads       int // full reads (Read), not ReadSubsystem
	revalidated []string
	failApply   func(e configfs.Export) error
	removeCalls []string
	// afterLinked, when not nil, runs after Linked has read the exports
	// and before it returns, without the lock.
	afterLinked func()
}

func newFakeNvmet() *fakeNvmet { return &fakeNvmet{exports: map[string]configfs.Export{}} }

func (f *fakeNvmet) Apply(ctx context.Context, e configfs.Export) error {
	n, err := e.Normalize()
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failApply != nil {
		if err := f.failApply(n); err != nil {
			// A partly applied export: the subsystem exists, nothing
			// is linked yet.
			f.exports[n.NQN] = configfs.Export{NQN: n.NQN, Attrs: configfs.SubsystemAttrs{Model: n.Attrs.Model}}
			f.writes++
			return err
		}
	}
	if cur, ok := f.exports[n.NQN]; ok && equalExport(cur, n) {
		return nil
	}
	f.exports[n.NQN] = n
	f.writes++
	return nil
}

func equalExport(a, b configfs.Export) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

func (f *fakeNvmet) Remove(ctx context.Context, nqn string) error {
	if err := configfs.ValidateNQN(nqn); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeCalls = append(f.removeCalls, nqn)
	if _, ok := f.exports[nqn]; ok {
		delete(f.exports, nqn)
		f.writes++
	}
	return nil
}

func (f *fakeNvmet) Read(ctx context.Context) (*configfs.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.read(), nil
}

func (f *fakeNvmet) read() *configfs.State {
	st := &configfs.State{}
	ports := map[configfs.Address]*configfs.Port{}
	for _, nqn := range slices.Sorted(maps.Keys(f.exports)) {
		e := f.exports[nqn]
		st.Subsystems = append(st.Subsystems, configfs.Subsystem{NQN: nqn, Attrs: e.Attrs,
			Namespaces: slices.Clone(e.Namespaces), AllowedHosts: slices.Clone(e.AllowedHosts)})
		for _, a := range e.Ports {
			p := ports[a]
			if p == nil {
				p = &configfs.Port{ID: configfs.PreferredPortID(a), Address: a}
				ports[a] = p
			}
			p.Subsystems = append(p.Subsystems, nqn)
		}
	}
	for _, p := range ports {
		st.Ports = append(st.Ports, *p)
	}
	slices.SortFunc(st.Ports, func(a, b configfs.Port) int { return int(a.ID) - int(b.ID) })
	return st
}

func (f *fakeNvmet) Linked(ctx context.Context) (map[string]int, error) {
	f.mu.Lock()
	out := map[string]int{}
	for nqn, e := range f.exports {
		out[nqn] = len(e.Ports)
	}
	after := f.afterLinked
	f.mu.Unlock()
	if after != nil {
		after()
	}
	return out, nil
}

func (f *fakeNvmet) ReadExport(ctx context.Context, nqn string) (configfs.Export, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.read().Export(nqn)
	return e, ok, nil
}

func (f *fakeNvmet) ReadSubsystem(ctx context.Context, nqn string) (configfs.Subsystem, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sub, ok := f.read().Subsystem(nqn)
	return sub, ok, nil
}

// RevalidateSize follows configfs.FS.RevalidateSize: a namespace that
// does not exist is IsNotExist, revalidate_size of one that is not enabled
// is EINVAL.
func (f *fakeNvmet) RevalidateSize(ctx context.Context, nqn string, nsid uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.exports[nqn].Namespaces, func(ns configfs.Namespace) bool { return ns.NSID == nsid })
	if i < 0 {
		return &configfs.Error{Op: "revalidate", Path: nqn + "/namespaces/" + strconv.FormatUint(uint64(nsid), 10), Err: fs.ErrNotExist}
	}
	if !f.exports[nqn].Namespaces[i].Enabled {
		return &configfs.Error{Op: "write", Path: nqn + "/namespaces/" + strconv.FormatUint(uint64(nsid), 10) + "/revalidate_size", Err: syscall.EINVAL}
	}
	f.revalidated = append(f.revalidated, nqn+"/"+strconv.FormatUint(uint64(nsid), 10))
	return nil
}

// snapshot is the whole tree, for before/after comparisons.
func (f *fakeNvmet) snapshot(t *testing.T) string {
	t.Helper()
	st, err := f.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v", *st)
}

// fakeBackend is an in-memory store. Device paths are real files under a
// temporary directory, so the server's check for a vanished device works.
type fakeBackend struct {
	mu        sync.Mutex
	dir       string
	vols      map[string]backends.Volume
	missing   bool  // the pool or VG does not exist
	noDevice  bool  // volumes have no device node
	failNext  error // returned once by the next mutating call
	calls     []string
	total     int64
	blockCh   chan struct{} // Create waits on it when set
	enteredCh chan struct{} // Create signals here when set
	// createCtxErrs are the errors of each Create's context once it was
	// done waiting on blockCh.
	createCtxErrs []error
	// snaps are by SOURCE@ID: like ZFS, the fake takes one snapshot ID
	// under several sources; the agent keeps an ID to one.
	snaps          map[string]backends.Snapshot
	origin         map[string]string // volume ID -> what it was made from
	noSnapshots    bool              // a store without snapshots (linear LVM)
	getSnapshotErr error             // returned by every GetSnapshot when set
}

func newFakeBackend(dir string) *fakeBackend {
	return &fakeBackend{dir: dir, vols: map[string]backends.Volume{}, total: 10 << 30,
		snaps: map[string]backends.Snapshot{}, origin: map[string]string{}}
}

const unit = 4096

func (b *fakeBackend) begin(op, id string) error {
	b.calls = append(b.calls, op+" "+id)
	if b.missing {
		return &backends.Error{Op: op, Store: "fake", Volume: id, Err: backends.ErrStoreNotFound}
	}
	if err := b.failNext; err != nil {
		b.failNext = nil
		return &backends.Error{Op: op, Store: "fake", Volume: id, Err: err}
	}
	return nil
}

func (b *fakeBackend) Create(ctx context.Context, id string, size int64) (*backends.Volume, error) {
	if b.enteredCh != nil {
		select {
		case b.enteredCh <- struct{}{}:
		default:
		}
	}
	if b.blockCh != nil {
		<-b.blockCh
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.createCtxErrs = append(b.createCtxErrs, ctx.Err())
	if err := b.begin("create", id); err != nil {
		return nil, err
	}
	size, err := backends.RoundUp(size, unit)
	if err != nil {
		return nil, err
	}
	if v, ok := b.vols[id]; ok {
		if v.SizeBytes != size {
			return nil, &backends.Error{Op: "create", Volume: id, Err: backends.ErrConflict}
		}
		return &v, nil
	}
	if err := os.WriteFile(filepath.Join(b.dir, id), nil, 0o600); err != nil {
		return nil, err
	}
	v := backends.Volume{ID: id, Name: "fake/" + id, SizeBytes: size}
	b.vols[id] = v
	return &v, nil
}

func (b *fakeBackend) Delete(ctx context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.begin("delete", id); err != nil {
		return err
	}
	delete(b.vols, id)
	os.Remove(filepath.Join(b.dir, id))
	return nil
}

func (b *fakeBackend) Expand(ctx context.Context, id string, size int64) (*backends.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.begin("expand", id); err != nil {
		return nil, err
	}
	v, ok := b.vols[id]
	if !ok {
		return nil, &backends.Error{Op: "expand", Volume: id, Err: backends.ErrNotFound}
	}
	size, _ = backends.RoundUp(size, unit)
	if size < v.SizeBytes {
		return nil, &backends.Error{Op: "expand", Volume: id, Err: backends.ErrShrink}
	}
	v.SizeBytes = size
	b.vols[id] = v
	return &v, nil
}

func (b *fakeBackend) Get(ctx context.Context, id string) (*backends.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "get "+id)
	if b.missing {
		return nil, &backends.Error{Op: "get", Volume: id, Err: backends.ErrStoreNotFound}
	}
	v, ok := b.vols[id]
	if !ok {
		return nil, &backends.Error{Op: "get", Volume: id, Err: backends.ErrNotFound}
	}
	return &v, nil
}

func (b *fakeBackend) List(ctx context.Context) ([]backends.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.missing {
		return nil, &backends.Error{Op: "list", Err: backends.ErrStoreNotFound}
	}
	var out []backends.Volume
	for _, id := range slices.Sorted(maps.Keys(b.vols)) {
		// As the real backends' List: the node is reported, unless it is
		// missing.
		v := b.vols[id]
		if !b.noDevice {
			v.DevicePath = filepath.Join(b.dir, id)
		}
		out = append(out, v)
	}
	return out, nil
}

func (b *fakeBackend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.missing {
		return nil, &backends.Error{Op: "capacity", Err: backends.ErrStoreNotFound}
	}
	var used int64
	for _, v := range b.vols {
		used += v.SizeBytes
	}
	return &backends.Capacity{TotalBytes: b.total, AvailableBytes: b.total - used}, nil
}

func (b *fakeBackend) DevicePath(ctx context.Context, id string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "device "+id)
	if b.missing {
		return "", &backends.Error{Op: "device path", Volume: id, Err: backends.ErrStoreNotFound}
	}
	if _, ok := b.vols[id]; !ok {
		return "", &backends.Error{Op: "device path", Volume: id, Err: backends.ErrNotFound}
	}
	if b.noDevice {
		return "", &backends.Error{Op: "device path", Volume: id, Err: errors.New("no device node appeared")}
	}
	return filepath.Join(b.dir, id), nil
}

// mutations returns the calls that change the store.
func (b *fakeBackend) mutations() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, c := range b.calls {
		if op, _, _ := strings.Cut(c, " "); op == "create" || op == "delete" || op == "expand" || op == "snapshot" || op == "unsnapshot" || op == "clone" {
			out = append(out, c)
		}
	}
	return out
}

func (b *fakeBackend) beginSnap(op, id string) error {
	if err := b.begin(op, id); err != nil {
		return err
	}
	if b.noSnapshots {
		return &backends.Error{Op: op, Store: "fake", Volume: id, Err: backends.ErrUnsupported}
	}
	return nil
}

func (b *fakeBackend) CanSnapshot() error {
	if b.noSnapshots {
		return &backends.Error{Op: "snapshots", Store: "fake", Err: backends.ErrUnsupported}
	}
	return nil
}

func (b *fakeBackend) CreateSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.beginSnap("snapshot", id); err != nil {
		return nil, err
	}
	src, ok := b.vols[sourceID]
	if !ok {
		return nil, &backends.Error{Op: "snapshot", Volume: sourceID, Err: backends.ErrNotFound}
	}
	if s, ok := b.snaps[sourceID+"@"+id]; ok {
		return &s, nil
	}
	s := backends.Snapshot{ID: id, SourceID: sourceID, Name: "fake/" + sourceID + "@" + id, SizeBytes: src.SizeBytes, CreationTime: time.Unix(1700000000, 0)}
	b.snaps[sourceID+"@"+id] = s
	return &s, nil
}

func (b *fakeBackend) DeleteSnapshot(ctx context.Context, id, sourceID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.beginSnap("unsnapshot", id); err != nil {
		return err
	}
	delete(b.snaps, sourceID+"@"+id)
	return nil
}

func (b *fakeBackend) GetSnapshot(ctx context.Context, id, sourceID string) (*backends.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noSnapshots {
		return nil, &backends.Error{Op: "get snapshot", Volume: id, Err: backends.ErrUnsupported}
	}
	if b.getSnapshotErr != nil {
		return nil, &backends.Error{Op: "get snapshot", Volume: id, Err: b.getSnapshotErr}
	}
	s, ok := b.snaps[sourceID+"@"+id]
	if !ok {
		return nil, &backends.Error{Op: "get snapshot", Volume: id, Err: backends.ErrNotFound}
	}
	return &s, nil
}

func (b *fakeBackend) ListSnapshots(ctx context.Context) ([]backends.Snapshot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noSnapshots {
		return nil, &backends.Error{Op: "list snapshots", Err: backends.ErrUnsupported}
	}
	var out []backends.Snapshot
	for _, k := range slices.Sorted(maps.Keys(b.snaps)) {
		out = append(out, b.snaps[k])
	}
	return out, nil
}

// clone makes volume id from origin, of at least size and min bytes.
func (b *fakeBackend) clone(id, origin string, size, min int64) (*backends.Volume, error) {
	if err := b.beginSnap("clone", id); err != nil {
		return nil, err
	}
	size, err := backends.RoundUp(size, unit)
	if err != nil {
		return nil, err
	}
	if size < min {
		return nil, &backends.Error{Op: "clone", Volume: id, Err: backends.ErrShrink}
	}
	if v, ok := b.vols[id]; ok {
		if b.origin[id] != origin || v.SizeBytes != size {
			return nil, &backends.Error{Op: "clone", Volume: id, Err: backends.ErrConflict}
		}
		return &v, nil
	}
	if err := os.WriteFile(filepath.Join(b.dir, id), nil, 0o600); err != nil {
		return nil, err
	}
	v := backends.Volume{ID: id, Name: "fake/" + id, SizeBytes: size}
	b.vols[id], b.origin[id] = v, origin
	return &v, nil
}

func (b *fakeBackend) CreateFromSnapshot(ctx context.Context, id, snapshotID, sourceID string, size int64) (*backends.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.snaps[sourceID+"@"+snapshotID]
	if !ok {
		return nil, &backends.Error{Op: "clone", Volume: id, Err: backends.ErrNotFound}
	}
	return b.clone(id, "snapshot "+snapshotID, size, s.SizeBytes)
}

func (b *fakeBackend) CreateFromVolume(ctx context.Context, id, sourceID string, size int64) (*backends.Volume, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	src, ok := b.vols[sourceID]
	if !ok {
		return nil, &backends.Error{Op: "clone", Volume: id, Err: backends.ErrNotFound}
	}
	return b.clone(id, "volume "+sourceID, size, src.SizeBytes)
}
