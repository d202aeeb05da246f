package backends

import "errors"

// Sentinel errors. An *Error wraps at most one of them (none when the
// failure could not be classified); test with errors.Is or the Is* helpers.
var (
	// ErrInvalidArgument: bad input, refused before any command ran (an
	// invalid volume ID, a size that is not positive, a bad configuration),
	// or refused by the tool as invalid.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: no volume is owned by the ID.
	ErrNotFound = errors.New("volume not found")
	// ErrStoreNotFound: the pool, parent dataset, volume group or thin
	// pool the backend was configured with does not exist.
	ErrStoreNotFound = errors.New("store not found")
	// ErrConflict: the volume exists with another size, or its name is
	// taken by a volume the ID does not own.
	ErrConflict = errors.New("conflict with an existing volume")
	// ErrNoSpace: the store cannot hold the volume (or the growth).
	ErrNoSpace = errors.New("no space in store")
	// ErrShrink: an Expand asked for less than the current size.
	ErrShrink = errors.New("volumes cannot shrink")
	// ErrBusy: the volume is open (exported, mounted) and cannot be
	// destroyed.
	ErrBusy = errors.New("volume busy")
	// ErrThinPoolNotZeroing: the LVM thin pool does not zero the chunks it
	// provisions (created or changed with --zero n), and the store was not
	// configured to accept that. A write smaller than a chunk then leaves
	// the rest of the chunk as a deleted volume left it, readable by the
	// new volume. Fixed on the node with lvchange --zero y VG/POOL.
	ErrThinPoolNotZeroing = errors.New("thin pool does not zero new blocks")
	// ErrUnsupported: the store cannot do what was asked (snapshots and
	// clones of a linear LVM store); the message names the store's type.
	ErrUnsupported = errors.New("not supported by this store")
)

// Error is the one error type of the backends. Op is the Backend method
// ("create", "delete", ...), Volume the volume ID (empty for store-wide
// operations), Store the backend's store (a pool/dataset or VG[/thinpool]),
// and Err the cause: a chain holding a sentinel when the cause is known and,
// when a command failed, its *command.Error.
type Error struct {
	Op     string
	Store  string
	Volume string
	Err    error
}

func (e *Error) Error() string {
	s := "backends: " + e.Op
	if e.Store != "" {
		s += " in " + e.Store
	}
	if e.Volume != "" {
		s += " volume " + e.Volume
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// IsNotFound reports whether err says that no volume is owned by the ID.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsConflict reports whether err says that the volume exists with another
// size or its name is taken by a volume the ID does not own.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsNoSpace reports whether err says that the store cannot hold a volume.
func IsNoSpace(err error) bool { return errors.Is(err, ErrNoSpace) }

// IsInvalidArgument reports whether err rejects its input.
func IsInvalidArgument(err error) bool { return errors.Is(err, ErrInvalidArgument) }

// IsStoreNotFound reports whether err says that the configured pool, dataset,
// volume group or thin pool does not exist.
func IsStoreNotFound(err error) bool { return errors.Is(err, ErrStoreNotFound) }

// IsShrink reports whether err refuses to shrink a volume.
func IsShrink(err error) bool { return errors.Is(err, ErrShrink) }

// IsBusy reports whether err says that the volume is open.
func IsBusy(err error) bool { return errors.Is(err, ErrBusy) }

// IsThinPoolNotZeroing reports whether err refuses a thin pool that does not
// zero the chunks it provisions.
func IsThinPoolNotZeroing(err error) bool { return errors.Is(err, ErrThinPoolNotZeroing) }

// IsUnsupported reports whether err says that the store cannot do what was
// asked.
func IsUnsupported(err error) bool { return errors.Is(err, ErrUnsupported) }
