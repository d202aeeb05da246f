package zfs

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/internal/admit"
	"github.com/pillar-csi/pillar-csi/backends/internal/batch"
	"github.com/pillar-csi/pillar-csi/backends/internal/errs"
	"github.com/pillar-csi/pillar-csi/backends/internal/memo"
)

// Backend is a ZFS store. It is safe for concurrent use; see the package
// backends documentation for the contract.
type Backend struct {
	pool         string
	parent       string // the dataset holding the zvols: pool or pool/parent
	sparse       bool
	volBlockSize int64
	createOpts   []string // -o arguments of zfs create, without the owner
	ratio        float64
	// busyRetries and busyDelay: how often, and how far apart, Delete
	// repeats a destroy that found the zvol busy.
	busyRetries   int
	busyDelay     time.Duration
	run           command.InputRunner
	deviceTimeout time.Duration
	// zvols finds the /dev/zdN node of each zvol.
	zvols *zvolIndex
	// poolImported tells from the ZFS module whether a pool is imported,
	// when it can (known).
	poolImported func(pool string) (imported, known bool)
	// seen is the volumes this process made or listed as its own, with a
	// device (volmode other than none), and has not deleted since:
	// DevicePath finds their node without listing them again.
	seen memo.Map[struct{}]
	// lookups lists the zvols that Get, DevicePath and the like ask for
	// at once in one zfs list.
	lookups batch.Group[zvol]

	// admit serialises the admission decisions of sparse creates,
	// expansions and clones, so that two of them cannot both fit into the
	// same available space; their commands run side by side, their bytes
	// reserved until they end. Thick volumes are admitted by ZFS itself.
	admit admit.Lock
	// figure is what sparse creates and expansions are admitted against
	// between capacity listings; guarded by admit.
	figure admission
}

var _ backends.Backend = (*Backend)(nil)

// volumeProps are the columns of every zfs list of volumes, in order.
var volumeProps = "name,volsize,volblocksize,refreservation,volmode," + OwnerProperty

// zvol is one row of a zfs list of volumeProps.
type zvol struct {
	name           string
	volSize        int64
	volBlockSize   int64
	refReservation int64
	volMode        string
	owner          string // "-" when unset
}

func (z *zvol) volume() *backends.Volume {
	return &backends.Volume{
		ID:        z.owner,
		Name:      z.name,
		SizeBytes: z.volSize,
		// A thick zvol's refreservation covers its volsize (plus
		// metadata); a sparse one has none.
		Thin: z.refReservation < z.volSize,
	}
}

func (b *Backend) dataset(id string) string { return b.parent + "/" + id }

func (b *Backend) zfs(ctx context.Context, args ...string) ([]byte, error) {
	return b.run.Run(ctx, "zfs", args...)
}

// Create implements backends.Backend.
func (b *Backend) Create(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.create(ctx, id, sizeBytes)
	return v, errs.Wrap("create", b.parent, id, err)
}

func (b *Backend) create(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	name, err := b.checkID(id)
	if err != nil {
		return nil, err
	}
	size, err := backends.RoundUp(sizeBytes, b.volBlockSize)
	if err != nil {
		return nil, err
	}
	var res *admit.Reservation
	if b.sparse {
		var retried *backends.Volume
		res, err = b.admit.Reserve(func(reserved int64) (int64, error) {
			avail, err := b.available(ctx, size, reserved)
			if err != nil || size <= avail {
				return size, err
			}
			// A retried Create of a volume that exists already is
			// promised within the figure it is being compared to.
			if retried, err = b.existing(ctx, id, size); err == nil {
				return 0, admit.ErrMade
			} else if !backends.IsNotFound(err) {
				return 0, err
			}
			return 0, errs.New(backends.ErrNoSpace, nil, "%d bytes requested, %d available under overcommit ratio %g", size, avail, b.ratio)
		})
		if err == admit.ErrMade {
			return retried, nil
		}
		if err != nil {
			return nil, err
		}
		err = admit.ErrPanicked
		defer func() { res.End(err, b.figure.take) }()
	}
	args := []string{"create"}
	if b.sparse {
		args = append(args, "-s")
	}
	args = append(args, "-V", strconv.FormatInt(size, 10))
	args = append(args, b.createOpts...)
	args = append(args, "-o", OwnerProperty+"="+id, name)

	_, err = b.zfs(ctx, args...)
	if err != nil && errs.StderrContains(err, "parent does not exist") {
		if err := b.createParent(ctx); err != nil {
			return nil, err
		}
		_, err = b.zfs(ctx, args...)
	}
	switch {
	case err == nil:
		b.seen.Set(id, struct{}{})
		return &backends.Volume{ID: id, Name: name, SizeBytes: size, Thin: b.sparse}, nil
	case errs.StderrContains(err, "dataset already exists"):
		v, err := b.existing(ctx, id, size)
		if backends.IsNotFound(err) {
			// Deleted, and kept for the snapshots or clones that need it.
			return nil, errs.New(backends.ErrConflict, nil, "%s exists: %v", name, err)
		}
		return v, err
	}
	return nil, classify(err)
}

// existing returns the volume id if it exists with size bytes, and
// ErrConflict if it exists with another.
func (b *Backend) existing(ctx context.Context, id string, size int64) (*backends.Volume, error) {
	z, err := b.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if z.volSize != size {
		return nil, errs.New(backends.ErrConflict, nil, "%s exists with %d bytes, %d requested", z.name, z.volSize, size)
	}
	return z.volume(), nil
}

// createParent creates the parent dataset and any missing ancestors. It is
// never mounted: it only holds zvols. A concurrent Create may win the race.
func (b *Backend) createParent(ctx context.Context) error {
	_, err := b.zfs(ctx, "create", "-p", "-o", "canmount=off", b.parent)
	if err == nil || errs.StderrContains(err, "dataset already exists") {
		return nil
	}
	return classify(err)
}

// Get implements backends.Backend.
func (b *Backend) Get(ctx context.Context, id string) (*backends.Volume, error) {
	z, err := b.get(ctx, id)
	if err != nil {
		return nil, errs.Wrap("get", b.parent, id, err)
	}
	return z.volume(), nil
}

// SharesGets implements backends.GetSharer: Gets made at once are listed
// together (listVolume).
func (b *Backend) SharesGets() bool { return true }

func (b *Backend) get(ctx context.Context, id string) (*zvol, error) {
	name, err := b.checkID(id)
	if err != nil {
		return nil, err
	}
	z, err := b.listVolume(ctx, id, name)
	switch {
	case err == nil && z.volMode != "none":
		b.seen.Set(id, struct{}{})
	case err == nil, backends.IsNotFound(err), backends.IsConflict(err):
		b.seen.Forget(id)
	}
	return z, err
}

// listVolume lists the zvol name of volume id. Look-ups made at once share
// one zfs list (b.lookups), each answered by a listing that started after
// it was asked.
func (b *Backend) listVolume(ctx context.Context, id, name string) (*zvol, error) {
	z, err := b.lookups.Do(ctx, name)
	switch {
	case errors.Is(err, errNoDataset):
		return nil, b.notFound(ctx, name)
	case err != nil:
		return nil, err
	}
	return ownedBy(id, &z)
}

// maxListed is the most zvols one zfs list of listVolumes names.
const maxListed = 64

// errNoDataset is listVolumes' answer for a name that does not exist: a
// missing zvol or a missing pool, which notFound tells apart.
var errNoDataset = errors.New("dataset does not exist")

// listVolumes lists the zvols names in one zfs list and answers each
// name: its row, errNoDataset, ErrConflict for a dataset that is not a
// volume, or the command's error. zfs lists the names it can and reports
// each one it cannot on a line of its own ("cannot open 'NAME': REASON"),
// exiting 1.
func (b *Backend) listVolumes(ctx context.Context, names []string) map[string]batch.Result[zvol] {
	out, err := b.zfs(ctx, append([]string{"list", "-Hp", "-t", "volume", "-o", volumeProps}, names...)...)
	res := make(map[string]batch.Result[zvol], len(names))
	zs, perr := parseVolumes(out)
	for _, z := range zs {
		if slices.Contains(names, z.name) {
			res[z.name] = batch.Result[zvol]{Value: z}
		}
	}
	for _, name := range names {
		if _, ok := res[name]; ok {
			continue
		}
		var e error
		msg := stderrAbout(err, name, len(names) == 1)
		switch {
		case strings.Contains(msg, "dataset does not exist"):
			e = errNoDataset
		case strings.Contains(msg, "operation not applicable to datasets of this type"):
			e = errs.New(backends.ErrConflict, nil, "%s exists and is not a volume", name)
		case err != nil:
			e = classify(err)
		case perr != nil:
			e = perr
		default:
			e = fmt.Errorf("zfs list %s: unexpected output %q", name, out)
		}
		res[name] = batch.Result[zvol]{Err: e}
	}
	return res
}

// stderrAbout returns what a failed command's standard error says about
// the dataset name: the lines that quote it, or all of it when the
// command named no other (whole).
func stderrAbout(err error, name string, whole bool) string {
	ce := errs.Command(err)
	if ce == nil {
		return ""
	}
	if whole {
		return ce.Stderr
	}
	var about strings.Builder
	for line := range strings.Lines(ce.Stderr) {
		if strings.Contains(line, "'"+name+"'") {
			about.WriteString(line)
		}
	}
	return about.String()
}

// ownedBy returns z if volume id owns it: a zvol whose owner property
// names another volume, or none, is not id's, and one whose owner marks
// it deleted is gone.
func ownedBy(id string, z *zvol) (*zvol, error) {
	switch z.owner {
	case id:
		return z, nil
	case deletedOwner(id):
		return nil, errs.New(backends.ErrNotFound, nil, "%s was deleted; it stays until the snapshots and clones that need it are gone", z.name)
	}
	return nil, errs.New(backends.ErrConflict, nil, "%s exists and is not owned by volume %s (%s=%s)", z.name, id, OwnerProperty, z.owner)
}

// notFound tells a missing volume from a missing pool, which zfs list
// reports alike.
func (b *Backend) notFound(ctx context.Context, name string) error {
	// The module's statistics answer the common case (a pool that is
	// there) without a process; zpool tells a missing pool's error.
	if imported, known := b.poolImported(b.pool); known && imported {
		return errs.New(backends.ErrNotFound, nil, "%s does not exist", name)
	}
	_, err := b.run.Run(ctx, "zpool", "list", "-Hp", "-o", "name", b.pool)
	switch {
	case err == nil:
		return errs.New(backends.ErrNotFound, nil, "%s does not exist", name)
	case errs.StderrContains(err, "no such pool"):
		return errs.New(backends.ErrStoreNotFound, err, "pool %s", b.pool)
	}
	return classify(err)
}

// Delete implements backends.Backend.
func (b *Backend) Delete(ctx context.Context, id string) error {
	return errs.Wrap("delete", b.parent, id, b.delete(ctx, id))
}

func (b *Backend) delete(ctx context.Context, id string) error {
	name, err := b.checkID(id)
	if err != nil {
		return err
	}
	b.seen.Forget(id)
	v, err := b.destroy(ctx, name, id)
	// A zvol is briefly held open by the kernel right after it was
	// created or resized (its minor is set up or revalidated
	// asynchronously), and the destroy then fails with EBUSY: a delete
	// that follows at once would fail although nobody uses the volume.
	for i := 0; i < b.busyRetries && err == nil && v.errno == syscall.EBUSY; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.busyDelay):
		}
		v, err = b.destroy(ctx, name, id)
	}
	if err != nil {
		return err
	}
	return v.err("volume", name, id, OwnerProperty)
}

// err maps destroy.lua's verdict on name, which prop should name as id's
// (kind "volume" or "snapshot"), to the backend's error: nil when it is
// gone or kept for what needs it.
func (v verdict) err(kind, name, id, prop string) error {
	switch {
	case v.outcome == "destroyed", v.outcome == "absent", v.outcome == "deferred":
		return nil
	case v.outcome == "other":
		return errs.New(backends.ErrConflict, nil, "%s exists and is not a %s (%s)", name, kind, v.detail)
	case v.outcome == "foreign":
		return errs.New(backends.ErrConflict, nil, "%s exists and is not owned by %s %s (%s=%q)", name, kind, id, prop, v.detail)
	case v.outcome == "snapshots":
		return errs.New(backends.ErrBusy, nil, "%s has a snapshot pillar-csi did not make; destroy it, or it keeps the volume", name)
	case v.errno == syscall.EBUSY:
		return errs.New(backends.ErrBusy, nil, "%s is open", name)
	case v.errno != 0:
		return fmt.Errorf("destroying %s: %w", name, v.errno)
	}
	return fmt.Errorf("zfs program (destroy %s): unexpected result %q", name, v.outcome+"\t"+v.detail)
}

//go:embed destroy.lua
var destroyProgram []byte

// verdict is what destroy.lua returned: its outcome word, the detail after
// it, and for "failed" the destroy's errno.
type verdict struct {
	outcome, detail string
	errno           syscall.Errno
}

// destroy runs the channel program destroy.lua in mode "volume", which
// checks that name is a zvol owned by id and destroys it (or, while
// snapshots or clones need it, marks it deleted), atomically and in one
// zfs command (instead of a zfs list, then a zfs destroy that could meet
// another dataset by then).
func (b *Backend) destroy(ctx context.Context, name, id string) (verdict, error) {
	return b.program(ctx, "volume", name, OwnerProperty, id)
}

// program runs destroy.lua in mode on name, owned by id under prop.
func (b *Backend) program(ctx context.Context, mode, name, prop, id string) (verdict, error) {
	out, err := b.run.RunInput(ctx, destroyProgram, "zfs", "program", "-j", b.pool, "-", mode, name, prop, id, OwnerProperty, SnapshotProperty, CloneProperty)
	if err != nil {
		return verdict{}, classify(err)
	}
	var r struct {
		Return string `json:"return"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return verdict{}, fmt.Errorf("zfs program (destroy %s): unexpected output %q", name, out)
	}
	var v verdict
	v.outcome, v.detail, _ = strings.Cut(r.Return, "\t")
	if n, err := strconv.Atoi(v.detail); v.outcome == "failed" && err == nil && n > 0 {
		v.errno = syscall.Errno(n)
	}
	return v, nil
}

// Expand implements backends.Backend.
func (b *Backend) Expand(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.expand(ctx, id, sizeBytes)
	return v, errs.Wrap("expand", b.parent, id, err)
}

func (b *Backend) expand(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	if _, err := b.checkID(id); err != nil {
		return nil, err
	}
	if err := backends.ValidateSize(sizeBytes); err != nil {
		return nil, err
	}
	z, err := b.get(ctx, id)
	if err != nil {
		return nil, err
	}
	size, err := backends.RoundUp(sizeBytes, z.volBlockSize)
	if err != nil {
		return nil, err
	}
	switch {
	case size < z.volSize:
		return nil, errs.New(backends.ErrShrink, nil, "%s has %d bytes, %d requested", z.name, z.volSize, size)
	case size == z.volSize:
		return z.volume(), nil
	}
	v := z.volume()
	grow := size - z.volSize
	if v.Thin {
		var res *admit.Reservation
		res, err = b.admit.Reserve(func(reserved int64) (int64, error) {
			avail, err := b.available(ctx, grow, reserved)
			if err == nil && grow > avail {
				err = errs.New(backends.ErrNoSpace, nil, "growing by %d bytes, %d available under overcommit ratio %g", grow, avail, b.ratio)
			}
			return grow, err
		})
		if err != nil {
			return nil, err
		}
		err = admit.ErrPanicked
		defer func() { res.End(err, b.figure.take) }()
	}
	if _, err = b.zfs(ctx, "set", "volsize="+strconv.FormatInt(size, 10), z.name); err != nil {
		return nil, classify(err)
	}
	v.SizeBytes = size
	return v, nil
}

// List implements backends.Backend.
func (b *Backend) List(ctx context.Context) ([]backends.Volume, error) {
	vs, err := b.list(ctx)
	return vs, errs.Wrap("list", b.parent, "", err)
}

// listParent runs zfs list ARGS PARENT. none reports a parent dataset that
// does not exist yet, so nothing to list, unless the pool itself is
// missing (an error).
func (b *Backend) listParent(ctx context.Context, args ...string) (out []byte, none bool, err error) {
	out, err = b.zfs(ctx, append(append([]string{"list"}, args...), b.parent)...)
	if errs.StderrContains(err, "dataset does not exist") {
		if err := b.notFound(ctx, b.parent); !backends.IsNotFound(err) {
			return nil, false, err
		}
		return nil, true, nil
	}
	if err != nil {
		return nil, false, classify(err)
	}
	return out, false, nil
}

func (b *Backend) list(ctx context.Context) ([]backends.Volume, error) {
	out, none, err := b.listParent(ctx, "-Hp", "-t", "volume", "-d", "1", "-o", volumeProps)
	if err != nil {
		return nil, err
	}
	if none {
		return []backends.Volume{}, nil
	}
	zs, err := parseVolumes(out)
	if err != nil {
		return nil, err
	}
	// One look at the zvol devices for all volumes, without waiting: a
	// node the kernel has not made yet is reported as none.
	devs, err := b.zvols.devices()
	if err != nil {
		return nil, err
	}
	vs := []backends.Volume{}
	for _, z := range zs {
		// Owned: the property holds a volume ID, and it is the ID the
		// zvol is named after (a renamed or copied zvol is not ours).
		if backends.ValidateVolumeID(z.owner) == nil && z.name == b.dataset(z.owner) {
			v := z.volume()
			v.DevicePath = devs[z.name]
			vs = append(vs, *v)
		}
	}
	slices.SortFunc(vs, func(a, b backends.Volume) int { return strings.Compare(a.ID, b.ID) })
	return vs, nil
}

// Capacity implements backends.Backend.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	c, err := b.capacity(ctx)
	return c, errs.Wrap("capacity", b.parent, "", err)
}

// available returns the bytes that may still be promised to sparse zvols
// for a request of need bytes while reserved bytes are admitted to
// commands still running: the admission figure when it admits need, else
// a fresh listing's (see AdmissionMaxAge), less reserved. The caller
// decides under b.admit.
func (b *Backend) available(ctx context.Context, need, reserved int64) (int64, error) {
	if b.figure.admits(need + reserved) {
		return b.figure.available - reserved, nil
	}
	c, err := b.capacity(ctx)
	if err != nil {
		b.figure.forget()
		return 0, err
	}
	b.figure.record(c.AvailableBytes)
	return c.AvailableBytes - reserved, nil
}

// capacity lists every filesystem and volume of the pool: the parent
// dataset (or, before it exists, the pool's root) gives the physical
// figures, and every sparse zvol in the pool, in this store or not, is
// promised its full size because it will take it from the same free space.
func (b *Backend) capacity(ctx context.Context) (*backends.Capacity, error) {
	out, err := b.zfs(ctx, "list", "-Hp", "-r", "-t", "filesystem,volume", "-o", "name,used,available,volsize,refreservation,referenced", b.pool)
	if errs.StderrContains(err, "dataset does not exist") {
		return nil, errs.New(backends.ErrStoreNotFound, err, "pool %s", b.pool)
	}
	if err != nil {
		return nil, classify(err)
	}
	rows, err := parseRows(out, 6)
	if err != nil {
		return nil, err
	}
	var base []string
	var outstanding int64
	for _, r := range rows {
		if r[0] == b.parent || (r[0] == b.pool && base == nil) {
			base = r
		}
		if r[3] == "-" {
			continue // a filesystem
		}
		n, err := ints(r[3:6])
		if err != nil {
			return nil, err
		}
		// What a zvol may still take beyond what it uses or has reserved.
		volSize, refres, referenced := n[0], n[1], n[2]
		if more := volSize - max(refres, referenced); more > 0 {
			// Saturating: a sum that wrapped would promise nothing.
			outstanding += min(more, math.MaxInt64-outstanding)
		}
	}
	if base == nil {
		return nil, fmt.Errorf("zfs list %s: no row for the pool in %q", b.pool, out)
	}
	n, err := ints(base[1:3])
	if err != nil {
		return nil, err
	}
	used, avail := n[0], n[1]
	if used > math.MaxInt64-avail {
		return nil, fmt.Errorf("zfs list %s: used %d and available %d bytes overflow 64 bits", b.pool, used, avail)
	}
	c := &backends.Capacity{TotalBytes: used + avail, AvailableBytes: avail}
	if b.sparse {
		c.AvailableBytes = backends.Available(used+avail, used+min(outstanding, math.MaxInt64-used), b.ratio)
	}
	return c, nil
}

// DevicePath implements backends.Backend.
func (b *Backend) DevicePath(ctx context.Context, id string) (string, error) {
	p, err := b.devicePath(ctx, id)
	return p, errs.Wrap("device path", b.parent, id, err)
}

func (b *Backend) devicePath(ctx context.Context, id string) (string, error) {
	name, err := b.checkID(id)
	if err != nil {
		return "", err
	}
	// A volume seen before needs no listing: its node, which the index
	// confirms is name's by asking the device, is the answer. Only when
	// the node does not show within seenGrace (the zvol destroyed or
	// renamed behind the agent's back, its volmode changed, a node slow
	// to come) does the listing below tell why.
	if _, ok := b.seen.Get(id); ok {
		wctx, cancel := context.WithTimeout(ctx, min(seenGrace, b.deviceTimeout))
		dev, err := b.awaitDevice(wctx, name)
		cancel()
		if err == nil || ctx.Err() != nil {
			return dev, err
		}
	}
	z, err := b.get(ctx, id)
	if err != nil {
		return "", err
	}
	if z.volMode == "none" {
		return "", errs.New(backends.ErrInvalidArgument, nil, "%s has volmode=none and no device", z.name)
	}
	ctx, cancel := context.WithTimeout(ctx, b.deviceTimeout)
	defer cancel()
	return b.awaitDevice(ctx, z.name)
}

// seenGrace is how long DevicePath waits for the node of a volume it has
// seen before it lists the volume to learn why the node is missing.
const seenGrace = 5 * time.Second

// awaitDevice waits until the zvol name has a device node, or ctx ends.
func (b *Backend) awaitDevice(ctx context.Context, name string) (string, error) {
	// The kernel makes a new zvol's node within milliseconds: look again
	// after 5 ms, then twice as long each time, up to 100 ms.
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		dev, ok, err := b.zvols.device(name)
		if err != nil {
			return "", err
		}
		if ok {
			return dev, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for the device node of %s: %w", name, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// checkID validates id and returns the zvol's name.
func (b *Backend) checkID(id string) (string, error) {
	if err := backends.ValidateVolumeID(id); err != nil {
		return "", err
	}
	name := b.dataset(id)
	if len(name) > maxDatasetName {
		return "", errs.New(backends.ErrInvalidArgument, nil, "zvol name %s is %d bytes, ZFS allows %d", name, len(name), maxDatasetName)
	}
	return name, nil
}

// classify maps a zfs or zpool failure that the operation did not handle
// itself to a sentinel.
func classify(err error) error {
	ce := errs.Command(err)
	switch {
	case ce == nil:
		return err
	case strings.Contains(ce.Stderr, "no such pool"):
		return errs.New(backends.ErrStoreNotFound, err, "pool missing")
	case strings.Contains(ce.Stderr, "out of space"),
		strings.Contains(ce.Stderr, "size is greater than available space"):
		return errs.New(backends.ErrNoSpace, err, "pool full")
	case ce.ExitCode == 2,
		strings.Contains(ce.Stderr, "invalid property"),
		strings.Contains(ce.Stderr, "' must be "),
		strings.Contains(ce.Stderr, "bad property value"):
		return errs.New(backends.ErrInvalidArgument, err, "refused by zfs")
	}
	return err
}
