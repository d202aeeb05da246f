package lvm

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/internal/admit"
	"github.com/pillar-csi/pillar-csi/backends/internal/batch"
	"github.com/pillar-csi/pillar-csi/backends/internal/errs"
	"github.com/pillar-csi/pillar-csi/backends/internal/memo"
)

// Backend is an LVM store. It is safe for concurrent use; see the package
// backends documentation for the contract.
type Backend struct {
	vg       string
	thinPool string // "" for linear volumes
	// allowUnzeroed accepts a thin pool that does not zero new chunks.
	allowUnzeroed bool
	store         string // vg or vg/thinpool, for errors
	ratio         float64
	config        string // the --config of every lvm command
	run           command.Runner
	// checkNode reports whether a path is the block device major:minor,
	// and blockNode which device a node is.
	checkNode func(path string, major, minor int64) error
	blockNode func(path string) (major, minor int64, err error)
	// nodes is the device node DevicePath last found for each volume,
	// forgotten when the volume is deleted: a node still there with its
	// device numbers is the answer without listing the LV again.
	nodes memo.Map[node]
	// lookups reports the LVs that Gets ask for at once in one lvs.
	lookups batch.Group[lv]

	// listings counts the admission listings begun; last is the newest
	// (admissionListing).
	listings atomic.Uint64
	last     poolListing
	// afterAsked, when not nil, is called by a thin create with its LV's
	// name once it has read which listings had begun (tests order it).
	afterAsked func(name string)

	// admit serialises the admission decisions of thin creates,
	// expansions, snapshots and clones, so that two of them cannot both
	// fit into the same available space; their lvcreate and lvextend run
	// side by side (LVM's volume group lock serialises only the metadata
	// update), their bytes reserved until they end. Linear LVs are
	// admitted by LVM itself.
	admit admit.Lock
}

var _ backends.Backend = (*Backend)(nil)

// lvm runs `lvm CMD --config CONFIG ARGS...`: LVMConfig, plus the
// store's global_filter when it rejects devices.
func (b *Backend) lvm(ctx context.Context, cmd string, args ...string) ([]byte, error) {
	return b.run.Run(ctx, "lvm", append([]string{cmd, "--config", b.config}, args...)...)
}

// report runs a JSON report command (lvs, vgs) of targets with byte units.
func (b *Backend) report(ctx context.Context, cmd, fields string, targets ...string) ([]byte, error) {
	config := b.config
	if strings.Contains(fields, "lv_time") {
		// lv_time is printed in the host's report/time_format: pinned to
		// the layout the parser reads.
		config += ` report { time_format="%Y-%m-%d %T %z" }`
	}
	return b.run.Run(ctx, "lvm", append([]string{cmd, "--config", config, "--reportformat", "json", "--units", "b", "--nosuffix", "-o", fields}, targets...)...)
}

func (b *Backend) volume(id string, l *lv) *backends.Volume {
	v := &backends.Volume{ID: id, Name: b.vg + "/" + l.name, SizeBytes: l.size, Thin: l.thinVolume()}
	// lvs names the device-mapper path of an inactive LV too; only an
	// active one (with a kernel device number) has a node.
	if l.major >= 0 {
		v.DevicePath = l.dmPath
	}
	return v
}

// Create implements backends.Backend.
func (b *Backend) Create(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.create(ctx, id, sizeBytes)
	return v, errs.Wrap("create", b.store, id, err)
}

func (b *Backend) create(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	if err := backends.ValidateVolumeID(id); err != nil {
		return nil, err
	}
	if err := backends.ValidateSize(sizeBytes); err != nil {
		return nil, err
	}
	name := LVName(b.vg, id)
	var args []string
	var size int64
	var err error
	if b.thinPool == "" {
		out, err := b.report(ctx, "vgs", vgFields, b.vg)
		if err != nil {
			return nil, classify(err)
		}
		g, err := parseVG(out)
		if err != nil {
			return nil, err
		}
		if size, err = backends.RoundUp(sizeBytes, g.extentSize); err != nil {
			return nil, err
		}
		// Born with a zero tag: its extents held whatever a deleted LV
		// wrote, until zeroLV has overwritten them all.
		args = []string{"--yes", "--wipesignatures", "y", "--zero", "y", "--activate", "y", "--setactivationskip", "n",
			"--name", name, "--addtag", TagPrefix + id, "--addtag", zeroTag(0), "--size", sizeArg(size), b.vg}
	} else {
		var retried *lv
		var res *admit.Reservation
		asked := b.listings.Load()
		if b.afterAsked != nil {
			b.afterAsked(name)
		}
		res, err = b.admit.Reserve(func(reserved int64) (int64, error) {
			decide := func(l poolListing) (int64, error) {
				if err := b.zeroing(l.pool); err != nil {
					return 0, err
				}
				var err error
				if size, err = backends.RoundUp(sizeBytes, l.pool.extentSize); err != nil {
					return 0, err
				}
				// The listing shows a retried Create's volume: no
				// admission for it.
				if retried = find(l.lvs, name); retried != nil {
					return 0, admit.ErrMade
				}
				if avail := b.thinAvailable(l.lvs, l.pool) - l.taken - reserved; size > avail {
					return 0, errs.New(backends.ErrNoSpace, nil, "%d bytes requested, %d available in thin pool %s under overcommit ratio %g", size, avail, b.store, b.ratio)
				}
				return size, nil
			}
			// A listing begun after this create was asked for is as
			// fresh as one of its own: the creates of a burst share it.
			// One that refuses it is not trusted with the refusal.
			if b.last.seq > asked {
				if n, err := decide(b.last); !backends.IsNoSpace(err) {
					return n, err
				}
			}
			l, err := b.admissionListing(ctx)
			if err != nil {
				return 0, err
			}
			return decide(l)
		})
		if err == admit.ErrMade {
			return b.same(id, retried, size)
		}
		if err != nil {
			return nil, err
		}
		err = admit.ErrPanicked
		defer func() { res.End(err, b.last.take) }()
		args = []string{"--yes", "--activate", "y", "--setactivationskip", "n", "--type", "thin",
			"--name", name, "--addtag", TagPrefix + id, "--virtualsize", sizeArg(size), "--thinpool", b.thinPool, b.vg}
	}
	_, err = b.lvm(ctx, "lvcreate", args...)
	switch {
	case err == nil:
		// lvcreate --activate y made the node (LVMConfig: udev_rules=0).
		v := &backends.Volume{ID: id, Name: b.vg + "/" + name, SizeBytes: size, Thin: b.thinPool != "", DevicePath: dmPath(b.vg, name)}
		if b.thinPool == "" {
			if err := b.zeroLV(ctx, name, v.DevicePath, 0, size); err != nil {
				return nil, err
			}
		}
		// The node lvcreate made is the LV's: the export's device
		// look-up that follows needs no lvs.
		if major, minor, err := b.blockNode(v.DevicePath); err == nil {
			b.nodes.Set(id, node{path: v.DevicePath, major: major, minor: minor})
		}
		return v, nil
	case errs.StderrContains(err, "already exists in volume group"):
		l, err := b.get(ctx, id)
		if err != nil {
			return nil, err
		}
		v, err := b.same(id, l, size)
		if err != nil {
			return nil, err
		}
		// A Create cut short while it zeroed: finish before the volume
		// is handed out.
		if err := b.finishZeroing(ctx, id, l); err != nil {
			return nil, err
		}
		return v, nil
	case errs.StderrContains(err, "insufficient free space", "Insufficient free space"):
		return nil, errs.New(backends.ErrNoSpace, err, "volume group %s", b.vg)
	}
	return nil, classify(err)
}

// same returns the existing volume l if it is owned by id and has size
// bytes, and ErrConflict otherwise.
func (b *Backend) same(id string, l *lv, size int64) (*backends.Volume, error) {
	if err := b.owned(id, l); err != nil {
		return nil, err
	}
	if l.size != size {
		return nil, errs.New(backends.ErrConflict, nil, "%s/%s exists with %d bytes, %d requested", b.vg, l.name, l.size, size)
	}
	return b.volume(id, l), nil
}

func (b *Backend) owned(id string, l *lv) error {
	if !slices.Contains(l.tags, TagPrefix+id) {
		return errs.New(backends.ErrConflict, nil, "%s/%s exists and is not owned by volume %s (no tag %s%s)", b.vg, l.name, id, TagPrefix, id)
	}
	return nil
}

// ownerByName returns the ID of l's tag with prefix that names it: a
// valid ID whose LV name is l's. A tag copied from another LV (lvcreate
// --snapshot copies the origin's tags) or an LV renamed by hand does not.
func (b *Backend) ownerByName(l *lv, prefix string) (string, bool) {
	for _, t := range l.tags {
		if id, ok := strings.CutPrefix(t, prefix); ok && backends.ValidateVolumeID(id) == nil && l.name == LVName(b.vg, id) {
			return id, true
		}
	}
	return "", false
}

// poolListing is a listing of the volume group that thin creates are
// admitted on: its LVs, the thin pool among them, the bytes commands
// admitted since it was made have taken (they may not be in it), and its
// number among the admission listings begun (seq; 0 is none). Guarded by
// the admission lock.
type poolListing struct {
	seq   uint64
	lvs   []lv
	pool  *lv
	taken int64
}

// take counts n bytes an admitted command took against the listing.
func (l *poolListing) take(n int64) { l.taken += n }

// admissionListing lists the volume group for the admission of thin
// creates and keeps the listing as b.last. The caller holds the
// admission lock.
func (b *Backend) admissionListing(ctx context.Context) (poolListing, error) {
	seq := b.listings.Add(1)
	lvs, pool, err := b.listPool(ctx)
	if err != nil {
		return poolListing{}, err
	}
	b.last = poolListing{seq: seq, lvs: lvs, pool: pool}
	return b.last, nil
}

// listPool lists the volume group's LVs and finds the thin pool among them.
func (b *Backend) listPool(ctx context.Context) ([]lv, *lv, error) {
	out, err := b.report(ctx, "lvs", lvFields, b.vg)
	if err != nil {
		return nil, nil, classify(err)
	}
	lvs, err := parseLVs(out)
	if err != nil {
		return nil, nil, err
	}
	for i := range lvs {
		if lvs[i].name == b.thinPool {
			if !lvs[i].thinPool() {
				return nil, nil, errs.New(backends.ErrStoreNotFound, nil, "%s is not a thin pool (lv_attr %s)", b.store, lvs[i].attr)
			}
			return lvs, &lvs[i], nil
		}
	}
	return nil, nil, errs.New(backends.ErrStoreNotFound, nil, "thin pool %s not found", b.store)
}

// zeroing refuses a thin pool that does not zero the chunks it provisions,
// unless the store allows it. It is checked where a volume could get such
// chunks for the first time (Create) and where the store's health is read
// (Capacity), not on Expand: an existing volume of the pool already gets
// unzeroed chunks on any first write, grown or not, and refusing its growth
// would protect nobody.
func (b *Backend) zeroing(pool *lv) error {
	if b.allowUnzeroed || pool.zeroes() {
		return nil
	}
	return errs.New(backends.ErrThinPoolNotZeroing, nil,
		"zeroing is off (lv_attr %s): a new volume could read what a deleted volume wrote; "+
			"run `lvchange --zero y %s`, or allow unzeroed thin pools in the store's configuration",
		pool.attr, b.store)
}

// thinAvailable applies the overcommit rule: every thin LV in the pool,
// owned or not, is promised its full virtual size.
func (b *Backend) thinAvailable(lvs []lv, pool *lv) int64 {
	var promised int64
	for _, l := range lvs {
		if l.poolLV == b.thinPool && l.thinVolume() {
			promised += l.size
		}
	}
	return backends.Available(pool.size, promised, b.ratio)
}

// Get implements backends.Backend.
func (b *Backend) Get(ctx context.Context, id string) (*backends.Volume, error) {
	l, err := b.get(ctx, id)
	if err != nil {
		return nil, errs.Wrap("get", b.store, id, err)
	}
	return b.volume(id, l), nil
}

// get returns the LV of volume id, checking its ownership.
func (b *Backend) get(ctx context.Context, id string) (*lv, error) {
	if err := backends.ValidateVolumeID(id); err != nil {
		return nil, err
	}
	l, err := b.lookups.Do(ctx, LVName(b.vg, id))
	if err != nil {
		return nil, err
	}
	if err := b.owned(id, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// SharesGets implements backends.GetSharer: Gets made at once are
// reported together (listLVs).
func (b *Backend) SharesGets() bool { return true }

// maxListed is the most LVs one lvs of listLVs names.
const maxListed = 64

// listLVs reports the LVs names (of the volume group) in one lvs and
// answers each name: its row, ErrNotFound, or the command's error. lvs
// reports the LVs it finds and names each one it does not on a line of
// its own (Failed to find logical volume "VG/NAME"), exiting 5.
func (b *Backend) listLVs(ctx context.Context, names []string) map[string]batch.Result[lv] {
	return b.reportLVs(ctx, lvFields, names)
}

// reportLVs is listLVs of the columns fields.
func (b *Backend) reportLVs(ctx context.Context, fields string, names []string) map[string]batch.Result[lv] {
	targets := make([]string, len(names))
	for i, n := range names {
		targets[i] = b.vg + "/" + n
	}
	out, err := b.report(ctx, "lvs", fields, targets...)
	res := make(map[string]batch.Result[lv], len(names))
	lvs, perr := parseLVs(out)
	if perr == nil {
		for _, l := range lvs {
			if slices.Contains(names, l.name) {
				res[l.name] = batch.Result[lv]{Value: l}
			}
		}
	}
	var stderr string
	if ce := errs.Command(err); ce != nil {
		stderr = ce.Stderr
	}
	for i, name := range names {
		if _, ok := res[name]; ok {
			continue
		}
		var e error
		switch {
		case strings.Contains(stderr, `Failed to find logical volume "`+targets[i]+`"`),
			len(names) == 1 && strings.Contains(stderr, "Failed to find logical volume"):
			e = errs.New(backends.ErrNotFound, nil, "%s does not exist", targets[i])
		case err != nil:
			e = classify(err)
		case perr != nil:
			e = perr
		default:
			e = fmt.Errorf("lvs %s: unexpected report %q", targets[i], out)
		}
		res[name] = batch.Result[lv]{Err: e}
	}
	return res
}

// lvByName reports the columns fields of the LV name: ErrNotFound when
// there is none.
func (b *Backend) lvByName(ctx context.Context, name, fields string) (*lv, error) {
	r := b.reportLVs(ctx, fields, []string{name})[name]
	if r.Err != nil {
		return nil, r.Err
	}
	return &r.Value, nil
}

// Delete implements backends.Backend.
func (b *Backend) Delete(ctx context.Context, id string) error {
	return errs.Wrap("delete", b.store, id, b.delete(ctx, id))
}

func (b *Backend) delete(ctx context.Context, id string) error {
	if err := backends.ValidateVolumeID(id); err != nil {
		return err
	}
	b.nodes.Forget(id)
	return b.removeTagged(ctx, LVName(b.vg, id), []string{TagPrefix + id}, func() error {
		_, err := b.get(ctx, id)
		return err
	})
}

// removeTagged removes the LV name if it carries every tag. One command:
// lvremove takes the volume group's lock, then selects the LV only if it
// carries the tags, so an LV of that name that is not ours is never
// removed, and nothing can replace it between the check and the removal.
// When nothing was selected, lookup tells an LV already gone
// (ErrNotFound: success) from one that is not ours (its error).
func (b *Backend) removeTagged(ctx context.Context, name string, tags []string, lookup func() error) error {
	sel := `lv_name="` + name + `"`
	for _, t := range tags {
		sel += ` && lv_tags={"` + t + `"}`
	}
	out, err := b.lvm(ctx, "lvremove", "--yes", "--select", sel, b.vg)
	switch {
	case err == nil && strings.Contains(string(out), `Logical volume "`+name+`" successfully removed`):
		return nil
	case err == nil:
		// Nothing selected: the LV is gone, or it is not ours.
		err := lookup()
		switch {
		case backends.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("lvremove selected nothing, yet %s/%s carries the tags %v: %q", b.vg, name, tags, out)
	case errs.StderrContains(err, " in use", "open logical volume"):
		return errs.New(backends.ErrBusy, err, "%s/%s is open", b.vg, name)
	}
	return classify(err)
}

// Expand implements backends.Backend.
func (b *Backend) Expand(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	v, err := b.expand(ctx, id, sizeBytes)
	return v, errs.Wrap("expand", b.store, id, err)
}

func (b *Backend) expand(ctx context.Context, id string, sizeBytes int64) (*backends.Volume, error) {
	if err := backends.ValidateVolumeID(id); err != nil {
		return nil, err
	}
	if err := backends.ValidateSize(sizeBytes); err != nil {
		return nil, err
	}
	l, err := b.get(ctx, id)
	if err != nil {
		return nil, err
	}
	size, err := backends.RoundUp(sizeBytes, l.extentSize)
	if err != nil {
		return nil, err
	}
	// An Expand (or Create) cut short while it zeroed: finish first.
	if err := b.finishZeroing(ctx, id, l); err != nil {
		return nil, err
	}
	switch {
	case size < l.size:
		return nil, errs.New(backends.ErrShrink, nil, "%s/%s has %d bytes, %d requested", b.vg, l.name, l.size, size)
	case size == l.size:
		return b.volume(id, l), nil
	}
	if l.thinVolume() {
		grow := size - l.size
		var res *admit.Reservation
		res, err = b.admit.Reserve(func(reserved int64) (int64, error) {
			lvs, pool, err := b.listPool(ctx)
			if err != nil {
				return 0, err
			}
			if avail := b.thinAvailable(lvs, pool) - reserved; grow > avail {
				return 0, errs.New(backends.ErrNoSpace, nil, "growing by %d bytes, %d available in thin pool %s under overcommit ratio %g", grow, avail, b.store, b.ratio)
			}
			return grow, nil
		})
		if err != nil {
			return nil, err
		}
		// Ended when lvextend has: its new size is in every listing
		// after, and counted against the last one.
		defer func() { res.End(err, b.last.take) }()
		err = admit.ErrPanicked
	}
	if !l.thinVolume() {
		// The extents lvextend adds held whatever a deleted LV wrote:
		// the tag, written before them, says where zeroing starts if
		// this call is cut short.
		if _, err := b.lvm(ctx, "lvchange", "--addtag", zeroTag(l.size), b.vg+"/"+l.name); err != nil {
			return nil, classify(err)
		}
	}
	old := l.size
	_, err = b.lvm(ctx, "lvextend", "--size", sizeArg(size), b.vg+"/"+l.name)
	switch {
	case err == nil, errs.StderrContains(err, "matches existing size"):
		l.size = size
		if !l.thinVolume() {
			dev, err := b.devicePath(ctx, id)
			if err != nil {
				return nil, err
			}
			if err := b.zeroLV(ctx, l.name, dev, old, size); err != nil {
				return nil, err
			}
		}
		return b.volume(id, l), nil
	case errs.StderrContains(err, "not larger than existing size"):
		return nil, errs.New(backends.ErrShrink, err, "%s/%s grew meanwhile", b.vg, l.name)
	case errs.StderrContains(err, "insufficient free space", "Insufficient free space"):
		return nil, errs.New(backends.ErrNoSpace, err, "volume group %s", b.vg)
	}
	return nil, classify(err)
}

// zeroTagPrefix starts the tag of a linear LV whose bytes from the offset
// after it (decimal) to its end may still hold what another LV wrote on
// those extents: LVM hands freed extents to the next LV as they are, and
// lvcreate --zero y clears only the first 4 KiB. A linear LV is created
// with zeroTag(0), and an Expand adds zeroTag(old size) before lvextend;
// zeroLV overwrites the range with zeroes, moving the tag forward as it
// goes and removing it at the end. Until then the volume is not handed
// out (Create) or its growth not reported done (Expand), and a retried
// call resumes where the tag says. Thin LVs need none of this: their pool
// zeroes every chunk it provisions (zeroing).
const zeroTagPrefix = "pillar-csi.io_zero-from_"

// zeroChunk is how much one blkdiscard zeroes before the tag records the
// progress: a second or so on a disk that offloads zeroing, seconds to
// tens of seconds on one that must write it, well inside the command
// timeout.
const zeroChunk = 1 << 30

func zeroTag(from int64) string { return zeroTagPrefix + strconv.FormatInt(from, 10) }

// zeroFrom returns the offset of the LV's zero tag; ok is false without
// one. Only a tag spelled as zeroTag spells it counts: zeroLV removes
// zeroTag(from), so from another spelling ("0512") the tag would stay and
// the volume be zeroed again on every later Create retry and Expand.
func (l *lv) zeroFrom() (from int64, ok bool) {
	for _, t := range l.tags {
		if v, found := strings.CutPrefix(t, zeroTagPrefix); found {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && t == zeroTag(n) {
				return n, true
			}
		}
	}
	return 0, false
}

// finishZeroing completes the zeroing of an LV that carries a zero tag.
func (b *Backend) finishZeroing(ctx context.Context, id string, l *lv) error {
	from, ok := l.zeroFrom()
	if !ok {
		return nil
	}
	dev, err := b.devicePath(ctx, id)
	if err != nil {
		return err
	}
	return b.zeroLV(ctx, l.name, dev, min(from, l.size), l.size)
}

// zeroLV overwrites bytes [from, to) of LV name (device dev) with zeroes
// (blkdiscard --zeroout: the device's write-zeroes command where it has
// one, written zeroes where not), a chunk at a time, each recorded in the
// LV's zero tag, which it removes at the end. The LV carries zeroTag(from).
func (b *Backend) zeroLV(ctx context.Context, name, dev string, from, to int64) error {
	target := b.vg + "/" + name
	tag := zeroTag(from)
	for off := from; off < to; {
		n := min(zeroChunk, to-off)
		if _, err := b.run.Run(ctx, "blkdiscard", "--zeroout", "--offset", strconv.FormatInt(off, 10),
			"--length", strconv.FormatInt(n, 10), dev); err != nil {
			return fmt.Errorf("zeroing bytes %d to %d of %s, which may hold a deleted volume's data: %w", off, off+n, target, err)
		}
		if off += n; off < to {
			next := zeroTag(off)
			if _, err := b.lvm(ctx, "lvchange", "--deltag", tag, "--addtag", next, target); err != nil {
				return classify(err)
			}
			tag = next
		}
	}
	if _, err := b.lvm(ctx, "lvchange", "--deltag", tag, target); err != nil {
		return classify(err)
	}
	return nil
}

// List implements backends.Backend.
func (b *Backend) List(ctx context.Context) ([]backends.Volume, error) {
	vs, err := b.list(ctx)
	return vs, errs.Wrap("list", b.store, "", err)
}

func (b *Backend) list(ctx context.Context) ([]backends.Volume, error) {
	out, err := b.report(ctx, "lvs", lvFields, b.vg)
	if err != nil {
		return nil, classify(err)
	}
	lvs, err := parseLVs(out)
	if err != nil {
		return nil, err
	}
	vs := []backends.Volume{}
	for i := range lvs {
		// Owned: the tag holds a volume ID, and it is the ID the LV is
		// named after (a renamed LV is not ours).
		if id, ok := b.ownerByName(&lvs[i], TagPrefix); ok {
			vs = append(vs, *b.volume(id, &lvs[i]))
		}
	}
	slices.SortFunc(vs, func(a, b backends.Volume) int { return strings.Compare(a.ID, b.ID) })
	return vs, nil
}

// Capacity implements backends.Backend.
func (b *Backend) Capacity(ctx context.Context) (*backends.Capacity, error) {
	c, err := b.capacity(ctx)
	return c, errs.Wrap("capacity", b.store, "", err)
}

func (b *Backend) capacity(ctx context.Context) (*backends.Capacity, error) {
	if b.thinPool != "" {
		lvs, pool, err := b.listPool(ctx)
		if err != nil {
			return nil, err
		}
		if err := b.zeroing(pool); err != nil {
			return nil, err
		}
		return &backends.Capacity{TotalBytes: pool.size, AvailableBytes: b.thinAvailable(lvs, pool)}, nil
	}
	out, err := b.report(ctx, "vgs", vgFields, b.vg)
	if err != nil {
		return nil, classify(err)
	}
	g, err := parseVG(out)
	if err != nil {
		return nil, err
	}
	return &backends.Capacity{TotalBytes: g.size, AvailableBytes: g.free}, nil
}

// DevicePath implements backends.Backend.
func (b *Backend) DevicePath(ctx context.Context, id string) (string, error) {
	p, err := b.devicePath(ctx, id)
	return p, errs.Wrap("device path", b.store, id, err)
}

// devicePath returns lv_dm_path once it is the LV's device: the LV is
// activated if it is not, and a missing or stale node is made again.
func (b *Backend) devicePath(ctx context.Context, id string) (string, error) {
	if n, ok := b.nodes.Get(id); ok && b.checkNode(n.path, n.major, n.minor) == nil {
		return n.path, nil
	}
	l, err := b.get(ctx, id)
	if err != nil {
		return "", err
	}
	n, err := b.activeNode(ctx, id, l)
	if err != nil {
		return "", err
	}
	b.nodes.Set(id, n)
	return n.path, nil
}

// node is an LV's device node and the device numbers it must have.
type node struct {
	path         string
	major, minor int64
}

// activeNode returns the device node of l, the LV of volume id, activating
// it and making its node as needed.
func (b *Backend) activeNode(ctx context.Context, id string, l *lv) (node, error) {
	target := b.vg + "/" + l.name
	if l.major < 0 {
		if _, err := b.lvm(ctx, "lvchange", "--activate", "y", target); err != nil {
			return node{}, classify(err)
		}
		var err error
		if l, err = b.get(ctx, id); err != nil {
			return node{}, err
		}
		if l.major < 0 {
			return node{}, fmt.Errorf("%s is still inactive after lvchange --activate y", target)
		}
	}
	n := node{path: l.dmPath, major: l.major, minor: l.minor}
	if err := b.checkNode(n.path, n.major, n.minor); err == nil {
		return n, nil
	}
	if _, err := b.lvm(ctx, "vgmknodes", target); err != nil {
		return node{}, classify(err)
	}
	if err := b.checkNode(n.path, n.major, n.minor); err != nil {
		return node{}, fmt.Errorf("after vgmknodes: %w", err)
	}
	return n, nil
}

// sizeArg renders a size for --size and --virtualsize ("b": bytes).
func sizeArg(n int64) string { return strconv.FormatInt(n, 10) + "b" }

// classify maps an lvm failure that the operation did not handle itself to
// a sentinel.
func classify(err error) error {
	ce := errs.Command(err)
	switch {
	case ce == nil:
		return err
	case strings.Contains(ce.Stderr, "Volume group \"") && strings.Contains(ce.Stderr, "\" not found"):
		return errs.New(backends.ErrStoreNotFound, err, "volume group missing")
	case strings.Contains(ce.Stderr, "Pool ") && strings.Contains(ce.Stderr, " not found in Volume group"):
		return errs.New(backends.ErrStoreNotFound, err, "thin pool missing")
	case strings.Contains(ce.Stderr, "free space in thin pool"):
		return errs.New(backends.ErrNoSpace, err, "thin pool full")
	case ce.ExitCode == 3: // EINVALID_CMD_LINE
		return errs.New(backends.ErrInvalidArgument, err, "refused by lvm")
	}
	return err
}
