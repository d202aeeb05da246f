package configfs

import (
	"hash/fnv"
	"slices"
	"strings"
	"syscall"
)

// Port IDs are chosen from [1, maxPortID]; 0 is legal for nvmet but
// nvmetcli and most documentation start at 1, and 0xffff is kept free.
const maxPortID = 0xfffe

// PreferredPortID is the ID Apply gives a new port for addr when it is free:
// a hash of the normalized address. The same address therefore gets the
// same ID every time its port is created, on every node and after every
// reboot, whatever the order exports are applied in; only a hash collision
// with a port that already exists moves a new port to the next free ID.
func PreferredPortID(addr Address) uint16 {
	h := fnv.New32a()
	h.Write([]byte(canonicalAddress(addr).key()))
	return uint16(1 + h.Sum32()%maxPortID)
}

// portInfo is a port as Apply and Remove see it: its ID and the canonical
// form of its address.
type portInfo struct {
	id   uint16
	addr Address
}

// scanPorts reads the address of every port.
func (f *FS) scanPorts() ([]portInfo, error) { return f.readPorts("") }

// linkedPorts returns the ports that have a link named after the subsystem
// (the name Apply, nvmetcli and the usual shell recipes give it), with their
// addresses.
func (f *FS) linkedPorts(nqn string) ([]portInfo, error) { return f.readPorts(nqn) }

// readPorts reads the addresses of the ports that link linkedTo ("" for all
// ports). Checking the link first costs one readlink per port and spares
// the four attribute reads of every port the subsystem is not on.
func (f *FS) readPorts(linkedTo string) ([]portInfo, error) {
	names, err := f.listDirs(f.portsDir())
	if err != nil {
		return nil, err
	}
	var out []portInfo
	for _, name := range names {
		id, err := parseUint16(name)
		if err != nil {
			continue
		}
		if linkedTo != "" {
			_, err = f.sys.readlink(f.portSubsystemLink(id, linkedTo))
			if IsNotExist(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
		}
		addr, ok, err := f.portAddress(id)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, portInfo{id: id, addr: addr})
		}
	}
	return out, nil
}

// portAddress reads the canonical address of port id; ok is false when the
// port does not exist (any more).
func (f *FS) portAddress(id uint16) (Address, bool, error) {
	a := f.probeAttrs(f.portDir(id))
	trtype, err := f.sys.readAttr(a.dir + "/addr_trtype")
	if IsNotExist(err) {
		return Address{}, false, nil
	}
	if err != nil {
		return Address{}, false, err
	}
	addr := Address{
		TrType:  strings.TrimSuffix(trtype, "\n"),
		AdrFam:  a.str("addr_adrfam"),
		TrAddr:  a.str("addr_traddr"),
		TrSvcID: a.str("addr_trsvcid"),
	}
	return canonicalAddress(addr), a.err == nil, a.err
}

// linkPort links the subsystem to the port listening on addr, creating the
// port when none exists. The caller holds the lock for addr.
func (f *FS) linkPort(nqn string, addr Address) error {
	ports, err := f.scanPorts()
	if err != nil {
		return err
	}
	id, created := uint16(0), false
	for _, p := range ports {
		if p.addr == addr {
			id = p.id
			break
		}
	}
	if id == 0 {
		if id, err = f.createPort(addr, ports); err != nil {
			return err
		}
		created = true
	}
	// Linking the first subsystem enables the port: the transport binds
	// its listener here, so EADDRINUSE, EADDRNOTAVAIL or EINVAL (a
	// transport module that is not loaded) surface from this symlink.
	err = f.sys.symlink(f.subsystemDir(nqn), f.portSubsystemLink(id, nqn))
	if IsExist(err) {
		return nil
	}
	if err != nil && created {
		// Do not leave behind a port nothing can use.
		_ = f.removeIfUnused(f.portDir(id))
	}
	return err
}

// createPort makes a new port directory for addr and writes its address.
func (f *FS) createPort(addr Address, known []portInfo) (uint16, error) {
	f.portAlloc.Lock()
	used := make(map[uint16]bool, len(known))
	for _, p := range known {
		used[p.id] = true
	}
	// A port another process created since the scan makes mkdir fail
	// with EEXIST, and the next ID is tried.
	id := PreferredPortID(addr)
	var err error
	for tries := 0; ; tries++ {
		if tries == maxPortID {
			f.portAlloc.Unlock()
			return 0, &Error{Op: "allocate port", Path: f.portsDir(), Err: syscall.ENOSPC}
		}
		if !used[id] {
			err = f.sys.mkdir(f.portDir(id))
			if err == nil {
				break
			}
			if !IsExist(err) {
				f.portAlloc.Unlock()
				return 0, err
			}
		}
		if id++; id > maxPortID {
			id = 1
		}
	}
	f.portAlloc.Unlock()

	dir := f.portDir(id)
	for _, w := range [...]struct{ name, value string }{
		{"addr_trtype", addr.TrType},
		{"addr_adrfam", addr.AdrFam},
		{"addr_traddr", addr.TrAddr},
		{"addr_trsvcid", addr.TrSvcID},
	} {
		if w.value == "" {
			continue
		}
		if err := f.sys.writeAttr(dir+"/"+w.name, w.value); err != nil {
			_ = f.sys.rmdir(dir)
			return 0, err
		}
	}
	return id, nil
}

// unlinkPort removes the subsystem's link from port id and then the port
// itself if nothing else uses it. The caller holds the lock for the port's
// address. Dropping the link tears down the controllers the subsystem has
// on that port; dropping the last link disables the port (closes its
// listener).
func (f *FS) unlinkPort(nqn string, id uint16) error {
	if err := f.sys.unlink(f.portSubsystemLink(id, nqn)); err != nil && !IsNotExist(err) {
		return err
	}
	return f.removeIfUnused(f.portDir(id))
}

func sortedAddresses(a []Address) []Address {
	slices.SortFunc(a, compareAddress)
	return a
}
