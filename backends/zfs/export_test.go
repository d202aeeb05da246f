package zfs

import (
	"os"
	"time"
)

// SetZvolDevices replaces how b finds the zvols' device nodes: the unit
// tests have no /sys/block/zd*. f maps dataset names to device nodes.
func SetZvolDevices(b *Backend, f func() (map[string]string, error)) {
	scan := func() ([]zdev, error) {
		m, err := f()
		var out []zdev
		for _, dev := range m {
			out = append(out, zdev{dev: dev})
		}
		return out, err
	}
	ask := func(dev string) (string, error) {
		m, err := f()
		for name, d := range m {
			if d == dev {
				return name, err
			}
		}
		return "", os.ErrNotExist
	}
	b.zvols = newZvolIndex(scan, ask)
}

// SetBusyRetry sets how often and how far apart Delete repeats a busy
// destroy; the replay tests expect each capture once.
func SetBusyRetry(b *Backend, n int, delay time.Duration) { b.busyRetries, b.busyDelay = n, delay }

// SetClock replaces the clock that ages b's admission figure.
func SetClock(b *Backend, now func() time.Time) { b.figure.now = now }

// SetPoolImported replaces how b tells from the ZFS module whether a pool
// is imported; the replay tests' captures were made without it.
func SetPoolImported(b *Backend, f func(pool string) (imported, known bool)) { b.poolImported = f }

// WaitingLookups returns how many of b's zvol look-ups wait for a listing.
func WaitingLookups(b *Backend) int { return b.lookups.Waiting() }
