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

// portInfo is a port as Apply and Remove see it: its directory name, the
// ID the kernel parsed from that name, and the canonical form of its
// address.
type portInfo struct {
	name string
	id   uint16
	addr Address
}

// scanPorts reads the address of every port.
func (f *FS) scanPorts() ([]portInfo, error) {
	names, err := f.listDirs(f.portsDir())
	if err != nil {
		return nil, err
	}
	var out []portInfo
	for _, name := range names {
		id, err := parseID(name, 16)
		if err != nil {
			continue
		}
		addr, ok, err := f.portAddress(name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, portInfo{name: name, id: uint16(id), addr: addr})
		}
	}
	return out, nil
}

// portLink is a port the subsystem is linked to and the name of that link.
type portLink struct {
	portInfo
	link string
}

// linkedPorts returns every port that links the subsystem, whatever the
// link is named, with its address. Only those ports' addresses are read.
func (f *FS) linkedPorts(nqn string) ([]portLink, error) {
	names, err := f.listDirs(f.portsDir())
	if err != nil {
		return nil, err
	}
	var out []portLink
	for _, name := range names {
		id, err := parseID(name, 16)
		if err != nil {
			continue
		}
		link, ok, err := f.findPortLink(name, nqn)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		addr, ok, err := f.portAddress(name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, portLink{portInfo{name: name, id: uint16(id), addr: addr}, link})
		}
	}
	return out, nil
}

// findPortLink returns the name of the link in ports/<port>/subsystems
// whose target is the subsystem nqn. The link named after the subsystem
// (the name Apply, nvmetcli and the usual shell recipes give it) costs one
// readlink and, when it points at the subsystem, is the only one: nvmet
// refuses a second link to one subsystem on a port (EEXIST). Otherwise
// every link is read, because other tools may name links as they like and
// a link left in place keeps the subsystem reachable on that port.
func (f *FS) findPortLink(port, nqn string) (string, bool, error) {
	dir := f.portDir(port) + "/subsystems"
	target, err := f.sys.readlink(dir + "/" + nqn)
	switch {
	case err == nil && linkTarget(nqn, target, "subsystems") == nqn:
		return nqn, true, nil
	case err != nil && !IsNotExist(err):
		return "", false, err
	}
	links, err := f.readLinks(dir, "subsystems")
	if IsNotExist(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	for _, l := range links {
		if l.target == nqn {
			return l.name, true, nil
		}
	}
	return "", false, nil
}

// portAddress reads the canonical address of ports/<name>; ok is false
// when the port does not exist (any more).
func (f *FS) portAddress(name string) (Address, bool, error) {
	a := f.probeAttrs(f.portDir(name))
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
	port, found, err := f.choosePort(ports, addr)
	if err != nil {
		return err
	}
	created := false
	if !found {
		if port, err = f.createPort(addr, ports); err != nil {
			return err
		}
		created = true
	}
	// Linking the first subsystem enables the port: the transport binds
	// its listener here, so EADDRINUSE, EADDRNOTAVAIL or EINVAL (a
	// transport module that is not loaded) surface from this symlink.
	err = f.sys.symlink(f.subsystemDir(nqn), f.portSubsystemLink(port.name, nqn))
	if IsExist(err) {
		return nil
	}
	if err != nil && created {
		// Do not leave behind a port nothing can use.
		_ = f.removeIfUnused(f.portDir(port.name))
	}
	return err
}

// choosePort picks the port to link for addr among the scanned ports. Only
// one port per address can be enabled (the second would fail to bind,
// EADDRINUSE), but other tools may leave disabled ports on an address
// next to the enabled one: the enabled one (it has subsystem links) wins,
// else the first in name order. 0 is a valid port ID, so found, not the
// ID, tells whether there is one.
func (f *FS) choosePort(ports []portInfo, addr Address) (port portInfo, found bool, err error) {
	var matches []portInfo
	for _, p := range ports {
		if p.addr == addr {
			matches = append(matches, p)
		}
	}
	switch len(matches) {
	case 0:
		return portInfo{}, false, nil
	case 1:
		// The usual case: nothing to choose, and no listing of a
		// subsystems/ group that may hold hundreds of links.
		return matches[0], true, nil
	}
	port, found = matches[0], true
	for _, p := range matches {
		ents, err := f.sys.readDir(f.portDir(p.name) + "/subsystems")
		if IsNotExist(err) {
			continue
		}
		if err != nil {
			return portInfo{}, false, err
		}
		if slices.ContainsFunc(ents, func(e dirEntry) bool { return e.link }) {
			return p, true, nil
		}
	}
	return port, found, nil
}

// createPort makes a new port directory for addr, named with the decimal
// ID, and writes its address. IDs of known ports are skipped even when
// their directories are named differently ("0x10" is port 16): two ports
// with one ID would be indistinguishable in the discovery log.
func (f *FS) createPort(addr Address, known []portInfo) (portInfo, error) {
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
			return portInfo{}, &Error{Op: "allocate port", Path: f.portsDir(), Err: syscall.ENOSPC}
		}
		if !used[id] {
			err = f.sys.mkdir(f.portDir(uitoa(uint64(id))))
			if err == nil {
				break
			}
			if !IsExist(err) {
				f.portAlloc.Unlock()
				return portInfo{}, err
			}
		}
		if id++; id > maxPortID {
			id = 1
		}
	}
	f.portAlloc.Unlock()

	port := portInfo{name: uitoa(uint64(id)), id: id, addr: addr}
	dir := f.portDir(port.name)
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
			return portInfo{}, err
		}
	}
	return port, nil
}

// unlinkPort removes the subsystem's link (named link) from ports/<port>
// and then the port
// itself if nothing else uses it. The caller holds the lock for the port's
// address. Dropping the link tears down the controllers the subsystem has
// on that port; dropping the last link disables the port (closes its
// listener).
func (f *FS) unlinkPort(port, link string) error {
	if err := f.sys.unlink(f.portSubsystemLink(port, link)); err != nil && !IsNotExist(err) {
		return err
	}
	return f.removeIfUnused(f.portDir(port))
}

func sortedAddresses(a []Address) []Address {
	slices.SortFunc(a, compareAddress)
	return a
}
