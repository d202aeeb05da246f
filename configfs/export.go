package configfs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
)

// Apply makes the export e true: the subsystem with its attributes, exactly
// the namespaces listed, the links to the ports listening on e.Ports
// (creating ports that do not exist, sharing those that do) and the access
// list. It converges from any starting state — absent, partly applied,
// identical or different — and writes nothing that already has the wanted
// value, so applying an identical export does not disturb connected
// initiators.
//
// A change that takes access away from a host (a host no longer listed, or
// the access list switched on) also takes away the controllers hosts
// already have: nvmet checks the list only when a host connects, so Apply
// drops the subsystem's port links before it changes the list and links
// the same ports again after, holding their locks in between. Dropping a
// port link tears down the subsystem's controllers on that port; a host
// still listed reconnects (its initiator retries every reconnect_delay), a
// host no longer listed is refused. When the list cannot be changed, the
// links are made again before Apply returns the error. Only a process that
// dies in between leaves the subsystem unlinked; applying the export again
// (with its ports) links it.
//
// Apply works in the order the kernel requires: subsystem attributes,
// namespaces, access control, then port links, so that an initiator never
// reaches a subsystem whose namespaces or access list are still being
// written (a new subsystem starts with allow_any_host 0 and no hosts, which
// refuses everyone). It stops at the first error and leaves what it did in
// place; a later Apply continues from there.
//
// ctx is checked between steps. A single configfs write cannot be
// interrupted, but none of them waits for the network: the longest is a
// namespace enable, which opens the backing device. An enable that fails
// with ENOENT or ENXIO (a device the kernel is removing and making again)
// is tried again for up to 2 s while ctx lasts.
func (f *FS) Apply(ctx context.Context, e Export) error {
	want, err := e.normalize()
	if err != nil {
		return err
	}
	nqn := want.NQN
	unlock := f.subsystems.lock(nqn)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return &Error{Op: "apply", Path: nqn, Err: err}
	}

	dir := f.subsystemDir(nqn)
	cur := Subsystem{NQN: nqn}
	var names dirNames
	fresh := false
	switch err := f.sys.mkdir(dir); {
	case err == nil:
		// mkdir creates attr_*, namespaces/ and allowed_hosts/ with
		// kernel defaults, so there is nothing to read back.
		fresh = true
	case IsExist(err):
		var ok bool
		cur, names, ok, err = f.readForApply(want)
		if err != nil {
			return err
		}
		if !ok {
			// Removed by another process between mkdir and read.
			return &Error{Op: "apply", Path: dir, Err: syscall.ENOENT}
		}
	default:
		return err
	}

	steps := []func() error{
		func() error { return f.applySubsystemAttrs(nqn, want.Attrs, cur.Attrs, fresh) },
		func() error { return f.applyNamespaces(ctx, nqn, want.Namespaces, cur.Namespaces, names) },
		func() error {
			access := func() error { return f.applyAccess(nqn, want, cur, names.hosts, fresh) }
			if fresh || !narrows(want, cur) {
				return access()
			}
			return f.revoking(nqn, want.Ports, access)
		},
		func() error { return f.applyPorts(nqn, want.Ports, fresh) },
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return &Error{Op: "apply", Path: nqn, Err: err}
		}
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// revoking runs change (a narrowing of the access list) with the
// subsystem unlinked from its ports, which tears down every controller it
// has: links to a port in want are dropped and, once change has run
// (whether or not it succeeded), made again to the same port; a port not
// in want is unlinked for good, as applyPorts would. The locks of the
// ports in want are held throughout, in key order, so that no other
// subsystem's Remove takes a port away in between.
func (f *FS) revoking(nqn string, want []Address, change func() error) error {
	linked, err := f.linkedPorts(nqn)
	if err != nil {
		return err
	}
	var keep []portLink
	for _, p := range linked {
		if slices.Contains(want, p.addr) {
			keep = append(keep, p)
			continue
		}
		if err := f.unlinkPortLocked(p); err != nil {
			return err
		}
	}
	slices.SortFunc(keep, func(a, b portLink) int { return strings.Compare(a.addr.key(), b.addr.key()) })
	for i, p := range keep {
		if i > 0 && keep[i-1].addr.key() == p.addr.key() {
			continue // one lock per address
		}
		unlock := f.ports.lock(p.addr.key())
		defer unlock()
	}
	var dropped []portLink
	for _, p := range keep {
		if err := f.sys.unlink(f.portSubsystemLink(p.name, p.link)); err != nil && !IsNotExist(err) {
			return errors.Join(err, f.relink(nqn, dropped))
		}
		dropped = append(dropped, p)
	}
	return errors.Join(change(), f.relink(nqn, dropped))
}

// unlinkPortLocked drops the subsystem's link p, and the port when nothing
// else links it, under the port's lock.
func (f *FS) unlinkPortLocked(p portLink) error {
	unlock := f.ports.lock(p.addr.key())
	defer unlock()
	return f.unlinkPort(p.name, p.link)
}

// relink links the subsystem again to each port revoking dropped it from.
func (f *FS) relink(nqn string, ports []portLink) error {
	var errs []error
	for _, p := range ports {
		err := f.sys.symlink(f.subsystemDir(nqn), f.portSubsystemLink(p.name, nqn))
		if err != nil && !IsExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// applyPorts links the subsystem to a port for each wanted address and
// unlinks it from every other port.
func (f *FS) applyPorts(nqn string, want []Address, fresh bool) error {
	var linked []portLink
	if !fresh {
		var err error
		if linked, err = f.linkedPorts(nqn); err != nil {
			return err
		}
	}
	for _, addr := range want {
		if slices.ContainsFunc(linked, func(p portLink) bool { return p.addr == addr }) {
			continue
		}
		unlock := f.ports.lock(addr.key())
		err := f.linkPort(nqn, addr)
		unlock()
		if err != nil {
			return err
		}
	}
	for _, p := range linked {
		if slices.Contains(want, p.addr) {
			continue
		}
		if err := f.unlinkPortLocked(p); err != nil {
			return err
		}
	}
	return nil
}

// Remove deletes the subsystem nqn completely: its links from ports (and
// each port nothing else uses any more), its allowed-host links (and each
// host entry no other subsystem links), its namespaces and the subsystem
// itself. Removing a subsystem that does not exist succeeds; without nvmet
// (see NewFS) Remove fails with an IsNotExist error.
//
// Connected initiators lose the subsystem: dropping a port link tears down
// the subsystem's controllers on that port.
func (f *FS) Remove(ctx context.Context, nqn string) error {
	if err := ValidateNQN(nqn); err != nil {
		return err
	}
	unlock := f.subsystems.lock(nqn)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return &Error{Op: "remove", Path: nqn, Err: err}
	}
	dir := f.subsystemDir(nqn)
	if _, err := f.sys.readDir(dir); err != nil {
		if IsNotExist(err) {
			return f.nvmetPresent()
		}
		return err
	}

	// Port links first: the kernel refuses to remove a subsystem that is
	// the target of a link (EBUSY).
	ports, err := f.linkedPorts(nqn)
	if err != nil {
		return err
	}
	for _, p := range ports {
		if err := f.unlinkPortLocked(p); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return &Error{Op: "remove", Path: nqn, Err: err}
	}

	// Then its children: rmdir of a group fails with ENOTEMPTY while it
	// has links or user-made subdirectories.
	links, err := f.readLinks(dir+"/allowed_hosts", "hosts")
	if err != nil && !IsNotExist(err) {
		return err
	}
	for _, l := range links {
		if err := f.unlinkHost(nqn, l.target, l.name); err != nil {
			return err
		}
	}
	nsids, err := f.listDirs(dir + "/namespaces")
	if err != nil && !IsNotExist(err) {
		return err
	}
	for _, name := range nsids {
		if err := f.sys.rmdir(dir + "/namespaces/" + name); err != nil && !IsNotExist(err) {
			return err
		}
	}

	err = f.sys.rmdir(dir)
	if err != nil && !IsNotExist(err) {
		return err
	}
	return nil
}
