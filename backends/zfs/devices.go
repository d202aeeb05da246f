package zfs

import (
	"sync"
	"time"
)

// zvolIndex finds the device node of each zvol. Which zvol a /dev/zdN is
// can be asked only by opening it (ZFS's BLKZNAME ioctl), and an open is
// not free: while a zvol is open ZFS holds its objset, so a destroy of it
// at that moment fails with EBUSY, and the first open waits for ZFS's
// namespace lock, which every create and destroy takes. Asking every
// device on each lookup made one export open every zvol of the node, and
// a burst of exports open each zvol once per export.
//
// So the index asks each device once and remembers the answer with the
// device's diskseq, a number the kernel gives each disk it adds and never
// gives again until it reboots: a zdN destroyed and made again for
// another zvol has a new diskseq and is asked anew. A device whose
// diskseq cannot be read (a kernel before 5.15) is asked on every scan.
// A remembered answer is checked by asking that one device before it is
// returned by device, and a name found nowhere in memory makes device
// ask every device again at most every rescanEvery, for a zvol renamed
// under an existing device.
type zvolIndex struct {
	// scan lists the zd devices of /sys/block with their diskseq ("" when
	// the kernel has none).
	scan func() ([]zdev, error)
	// ask returns the dataset name of a device node.
	ask func(dev string) (string, error)

	mu sync.Mutex
	// known is the answer for each device node, with the diskseq it was
	// given for.
	known map[string]zdev
	// lastFull is when every device was last asked.
	lastFull time.Time
}

// zdev is one zvol device: its node, its diskseq, and (once asked) its
// dataset name; fresh when the name was asked in the last refresh.
type zdev struct {
	dev, seq, name string
	fresh          bool
}

// rescanEvery bounds how often a lookup that misses asks every device.
const rescanEvery = 5 * time.Second

func newZvolIndex(scan func() ([]zdev, error), ask func(string) (string, error)) *zvolIndex {
	return &zvolIndex{scan: scan, ask: ask, known: map[string]zdev{}, lastFull: time.Now()}
}

// devices returns the device node of every zvol that has one, by dataset
// name, asking only the devices it has not asked before.
func (x *zvolIndex) devices() (map[string]string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.refresh(false); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(x.known))
	for _, d := range x.known {
		out[d.name] = d.dev
	}
	return out, nil
}

// device returns the device node of the zvol name, and whether it has
// one. A node found in memory is asked again to confirm it.
func (x *zvolIndex) device(name string) (string, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.refresh(false); err != nil {
		return "", false, err
	}
	for dev, d := range x.known {
		if d.name != name {
			continue
		}
		if d.fresh {
			return dev, true, nil
		}
		got, err := x.ask(dev)
		if err == nil && got == name {
			return dev, true, nil
		}
		// Renamed, or gone since: forget it, so the next scan asks again.
		delete(x.known, dev)
	}
	if time.Since(x.lastFull) >= rescanEvery {
		if err := x.refresh(true); err != nil {
			return "", false, err
		}
		for dev, d := range x.known {
			if d.name == name {
				return dev, true, nil
			}
		}
	}
	return "", false, nil
}

// refresh brings known up to date with the devices there are: a device
// gone is forgotten, a device with a new (or no) diskseq is asked, and
// with all set every device is asked. Called with mu held.
func (x *zvolIndex) refresh(all bool) error {
	devs, err := x.scan()
	if err != nil {
		return err
	}
	next := make(map[string]zdev, len(devs))
	for _, d := range devs {
		if k, ok := x.known[d.dev]; ok && !all && d.seq != "" && k.seq == d.seq {
			k.fresh = false
			next[d.dev] = k
			continue
		}
		name, err := x.ask(d.dev)
		if err != nil {
			continue // being removed, or its node not made yet
		}
		d.name, d.fresh = name, true
		next[d.dev] = d
	}
	if all {
		x.lastFull = time.Now()
	}
	x.known = next
	return nil
}
