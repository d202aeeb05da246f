package configfs

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Read lists everything under <root>/nvmet: subsystems with their
// namespaces and allowed hosts, ports with their links, referrals and ANA
// groups, and hosts, including objects other tools created. Attributes the
// running kernel does not have are left at their zero value. An object
// removed by someone else while Read runs is left out rather than reported
// half-read.
func (f *FS) Read(ctx context.Context) (*State, error) {
	st := &State{}
	names, err := f.listDirs(f.subsystemsDir())
	if err != nil {
		return nil, err
	}
	for _, nqn := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sub, ok, err := f.readSubsystem(nqn)
		if err != nil {
			return nil, err
		}
		if ok {
			st.Subsystems = append(st.Subsystems, sub)
		}
	}

	if st.Ports, err = f.readAllPorts(ctx); err != nil {
		return nil, err
	}

	names, err = f.listDirs(f.hostsDir())
	if err != nil {
		return nil, err
	}
	for _, nqn := range names {
		h, ok, err := f.readHost(nqn)
		if err != nil {
			return nil, err
		}
		if ok {
			st.Hosts = append(st.Hosts, h)
		}
	}
	return st, nil
}

// ReadSubsystem reads one subsystem. The boolean is false when it does not
// exist; without nvmet (see NewFS) the error is an IsNotExist error.
func (f *FS) ReadSubsystem(ctx context.Context, nqn string) (Subsystem, bool, error) {
	if err := ValidateNQN(nqn); err != nil {
		return Subsystem{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return Subsystem{}, false, err
	}
	sub, ok, err := f.readSubsystem(nqn)
	if err == nil && !ok {
		err = f.nvmetPresent()
	}
	return sub, ok, err
}

// nvmetPresent returns nil when the nvmet tree exists and an IsNotExist
// error when it does not (nvmet not loaded, or a root that is not a
// configfs mount). Calls that find an object absent check it, so that "no
// such subsystem" is never reported for "no nvmet at all": a caller
// removing an export on a node where nvmet is not loaded must not believe
// it succeeded. It runs only on that path, so the common calls pay nothing.
func (f *FS) nvmetPresent() error {
	_, err := f.sys.readDir(f.nvmet)
	if err != nil && !IsNotExist(err) {
		return nil // the tree is there; the error is not about its absence
	}
	return err
}

// ReadExport reads the export of one subsystem, as State.Export reports
// it: the subsystem and the addresses of the ports it is linked to. It
// reads that subsystem and the ports (a node has few) but none of the
// other subsystems, so its cost does not grow with the number of exports.
// The boolean is false when the subsystem does not exist; without nvmet
// (see NewFS) the error is an IsNotExist error.
func (f *FS) ReadExport(ctx context.Context, nqn string) (Export, bool, error) {
	sub, ok, err := f.ReadSubsystem(ctx, nqn)
	if err != nil || !ok {
		return Export{}, false, err
	}
	ports, err := f.readAllPorts(ctx)
	if err != nil {
		return Export{}, false, err
	}
	st := State{Subsystems: []Subsystem{sub}, Ports: ports}
	e, _ := st.Export(nqn)
	return e, true, nil
}

// readAllPorts reads every port with its links, sorted by ID.
func (f *FS) readAllPorts(ctx context.Context) ([]Port, error) {
	names, err := f.listDirs(f.portsDir())
	if err != nil {
		return nil, err
	}
	var ports []Port
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		id, err := parseID(name, 16)
		if err != nil {
			// nvmet only accepts u16 names; anything else is not a port.
			continue
		}
		p, ok, err := f.readPort(name, uint16(id))
		if err != nil {
			return nil, err
		}
		if ok {
			ports = append(ports, p)
		}
	}
	slices.SortFunc(ports, func(a, b Port) int { return cmpUint(a.ID, b.ID) })
	return ports, nil
}

// attrSet reads the attribute files present in one configfs directory.
type attrSet struct {
	sys   sysOps
	dir   string
	names map[string]bool
	err   error
}

// openAttrs lists dir. ok is false when dir does not exist (any more), or
// is not a directory at all: a name a listing would not report as an
// object (a file, or a symlink, which readDir never follows and opens as
// ENOTDIR) is no object for the calls that name it directly either.
func (f *FS) openAttrs(dir string) (a *attrSet, ents []dirEntry, ok bool, err error) {
	ents, err = f.sys.readDir(dir)
	if IsNotExist(err) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	a = &attrSet{sys: f.sys, dir: dir, names: map[string]bool{}}
	for _, e := range ents {
		if e.file {
			a.names[e.name] = true
		}
	}
	return a, ents, true, nil
}

// probeAttrs returns an attrSet that reads attributes by name without
// listing dir first, for Apply, which knows what it needs: a missing
// attribute reads as "".
func (f *FS) probeAttrs(dir string) *attrSet {
	return &attrSet{sys: f.sys, dir: dir}
}

// str returns the attribute's value without the trailing newline every nvmet
// show function appends, or "" when the kernel does not have it.
func (a *attrSet) str(name string) string {
	if a.err != nil || (a.names != nil && !a.names[name]) {
		return ""
	}
	v, err := a.sys.readAttr(a.dir + "/" + name)
	if err != nil {
		// Removed between readdir and read: treat as absent; Read
		// notices the vanished object when its directory is gone.
		if !IsNotExist(err) {
			a.err = err
		}
		return ""
	}
	return strings.TrimSuffix(v, "\n")
}

func (a *attrSet) boolean(name string) bool {
	v := a.str(name)
	b, err := parseBool(v)
	if err != nil && a.err == nil {
		a.err = &Error{Op: "parse", Path: a.dir + "/" + name, Err: err}
	}
	return b
}

func (a *attrSet) uint(name string, bits int) uint64 {
	v := a.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, bits)
	if err != nil && a.err == nil {
		a.err = &Error{Op: "parse", Path: a.dir + "/" + name, Err: err}
	}
	return n
}

func (a *attrSet) int(name string) int {
	v := a.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil && a.err == nil {
		a.err = &Error{Op: "parse", Path: a.dir + "/" + name, Err: err}
	}
	return n
}

func (f *FS) readSubsystemAttrs(a *attrSet) SubsystemAttrs {
	return SubsystemAttrs{
		AllowAnyHost: a.boolean("attr_allow_any_host"),
		Version:      a.str("attr_version"),
		// nvmet pads the serial with spaces to 20 bytes and shows the
		// padding.
		Serial:    strings.TrimRight(a.str("attr_serial"), " "),
		Model:     a.str("attr_model"),
		CntlIDMin: uint16(a.uint("attr_cntlid_min", 16)),
		CntlIDMax: uint16(a.uint("attr_cntlid_max", 16)),
		QIDMax:    uint16(a.uint("attr_qid_max", 16)),
		PIEnable:  a.boolean("attr_pi_enable"),
	}
}

func (f *FS) readSubsystem(nqn string) (Subsystem, bool, error) {
	sub, _, ok, err := f.readSubsystemLinks(nqn)
	return sub, ok, err
}

// readSubsystemLinks reads a subsystem and also returns, for each allowed
// host, the name of its link under allowed_hosts.
func (f *FS) readSubsystemLinks(nqn string) (Subsystem, map[string]string, bool, error) {
	dir := f.subsystemDir(nqn)
	a, _, ok, err := f.openAttrs(dir)
	if !ok || err != nil {
		return Subsystem{}, nil, false, err
	}
	sub := Subsystem{NQN: nqn, Attrs: f.readSubsystemAttrs(a)}
	if a.err != nil {
		return Subsystem{}, nil, false, a.err
	}

	nsids, err := f.listDirs(dir + "/namespaces")
	if err != nil && (!IsNotExist(err) || f.gone(dir)) {
		return Subsystem{}, nil, false, ignoreNotExist(err)
	}
	for _, name := range nsids {
		nsid, err := parseID(name, 32)
		if err != nil {
			continue
		}
		ns, ok, err := f.readNamespace(dir+"/namespaces/"+name, uint32(nsid))
		if err != nil {
			return Subsystem{}, nil, false, err
		}
		if ok {
			sub.Namespaces = append(sub.Namespaces, ns)
		}
	}
	slices.SortFunc(sub.Namespaces, func(a, b Namespace) int { return cmpUint(a.NSID, b.NSID) })

	links, err := f.readLinks(dir+"/allowed_hosts", "hosts")
	if err != nil && (!IsNotExist(err) || f.gone(dir)) {
		return Subsystem{}, nil, false, ignoreNotExist(err)
	}
	names := make(map[string]string, len(links))
	for _, l := range links {
		sub.AllowedHosts = append(sub.AllowedHosts, l.target)
		names[l.target] = l.name
	}
	slices.Sort(sub.AllowedHosts)
	return sub, names, true, nil
}

func (f *FS) readNamespace(dir string, nsid uint32) (Namespace, bool, error) {
	a, _, ok, err := f.openAttrs(dir)
	if !ok || err != nil {
		return Namespace{}, false, err
	}
	devicePath := a.str("device_path")
	if devicePath == "(null)" {
		// A new namespace has no path; the kernel prints the NULL
		// pointer with "%s".
		devicePath = ""
	}
	ns := Namespace{
		NSID:        nsid,
		DevicePath:  devicePath,
		DeviceUUID:  clearZero(a.str("device_uuid")),
		DeviceNGUID: clearZero(a.str("device_nguid")),
		ANAGroupID:  uint32(a.uint("ana_grpid", 32)),
		BufferedIO:  a.boolean("buffered_io"),
		Enabled:     a.boolean("enable"),
	}
	return ns, a.err == nil, a.err
}

func (f *FS) readAddress(a *attrSet) Address {
	return Address{
		TrType:  a.str("addr_trtype"),
		AdrFam:  a.str("addr_adrfam"),
		TrAddr:  a.str("addr_traddr"),
		TrSvcID: a.str("addr_trsvcid"),
	}
}

// readPort reads ports/<name>, whose ID the caller parsed from name.
func (f *FS) readPort(name string, id uint16) (Port, bool, error) {
	dir := f.portDir(name)
	a, _, ok, err := f.openAttrs(dir)
	if !ok || err != nil {
		return Port{}, false, err
	}
	p := Port{
		ID:             id,
		Address:        f.readAddress(a),
		TReq:           a.str("addr_treq"),
		InlineDataSize: a.int("param_inline_data_size"),
		PIEnable:       a.boolean("param_pi_enable"),
	}
	if a.err != nil {
		return Port{}, false, a.err
	}
	if p.Subsystems, err = f.listLinks(dir+"/subsystems", "subsystems"); err != nil && (!IsNotExist(err) || f.gone(dir)) {
		return Port{}, false, ignoreNotExist(err)
	}

	refs, err := f.listDirs(dir + "/referrals")
	if err != nil && !IsNotExist(err) {
		return Port{}, false, err
	}
	for _, name := range refs {
		ra, _, ok, err := f.openAttrs(dir + "/referrals/" + name)
		if err != nil {
			return Port{}, false, err
		}
		if !ok {
			continue
		}
		r := Referral{
			Name:    name,
			Address: f.readAddress(ra),
			PortID:  uint16(ra.uint("addr_portid", 16)),
			TReq:    ra.str("addr_treq"),
			Enabled: ra.boolean("enable"),
		}
		if ra.err != nil {
			return Port{}, false, ra.err
		}
		p.Referrals = append(p.Referrals, r)
	}

	groups, err := f.listDirs(dir + "/ana_groups")
	if err != nil && !IsNotExist(err) {
		return Port{}, false, err
	}
	for _, name := range groups {
		gid, err := parseID(name, 32)
		if err != nil {
			continue
		}
		ga, _, ok, err := f.openAttrs(dir + "/ana_groups/" + name)
		if err != nil {
			return Port{}, false, err
		}
		if !ok {
			continue
		}
		g := ANAGroup{ID: uint32(gid), State: ga.str("ana_state")}
		if ga.err != nil {
			return Port{}, false, ga.err
		}
		p.ANAGroups = append(p.ANAGroups, g)
	}
	slices.SortFunc(p.ANAGroups, func(a, b ANAGroup) int { return cmpUint(a.ID, b.ID) })
	return p, true, nil
}

func (f *FS) readHost(nqn string) (Host, bool, error) {
	a, _, ok, err := f.openAttrs(f.hostDir(nqn))
	if !ok || err != nil {
		return Host{}, false, err
	}
	h := Host{NQN: nqn, DHCHAPHash: a.str("dhchap_hash"), DHCHAPDHGroup: a.str("dhchap_dhgroup")}
	return h, a.err == nil, a.err
}

// listDirs returns the sorted names of the groups (subdirectories) in dir.
func (f *FS) listDirs(dir string) ([]string, error) {
	ents, err := f.sys.readDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.dir && !e.link {
			out = append(out, e.name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// listLinks returns the sorted names of the objects the links in dir point
// to (see readLinks).
func (f *FS) listLinks(dir, parentKind string) ([]string, error) {
	links, err := f.readLinks(dir, parentKind)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		out = append(out, l.target)
	}
	slices.Sort(out)
	return out, nil
}

// link is one configfs link: its own name and the name of its target.
type link struct {
	name, target string
}

// readLinks reads the links in dir. configfs answers readlink with a path
// relative to the link, such as "../../../../nvmet/hosts/<nqn>"; the
// target's last element is the object's name and the one before it is its
// kind (parentKind). Apply names links after their targets, but a link
// another tool named differently is still reported by its target.
func (f *FS) readLinks(dir, parentKind string) ([]link, error) {
	ents, err := f.sys.readDir(dir)
	if err != nil {
		return nil, err
	}
	var out []link
	for _, e := range ents {
		if !e.link {
			continue
		}
		target, err := f.sys.readlink(dir + "/" + e.name)
		if IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, link{name: e.name, target: linkTarget(e.name, target, parentKind)})
	}
	return out, nil
}

// linkTarget returns the name of the object a link points to, from what
// readlink returned: the last element when the one before it is parentKind,
// else (a fixture tree, not configfs) the link's own name.
func linkTarget(name, target, parentKind string) string {
	if d, b := path.Split(path.Clean(target)); b != "" && path.Base(d) == parentKind {
		return b
	}
	return name
}

// gone reports whether dir no longer exists, to tell an object removed
// during Read from one that merely lacks a group (a fixture, or a kernel
// without it).
func (f *FS) gone(dir string) bool {
	_, err := f.sys.readDir(dir)
	return IsNotExist(err)
}

func ignoreNotExist(err error) error {
	if IsNotExist(err) {
		return nil
	}
	return err
}

// Linked reports, for every subsystem that exists, how many ports it is
// linked to. It reads two directory levels and no attribute, so it is
// cheap enough to run every few seconds on a node with thousands of
// exports: enough to notice an export that another tool removed (its
// subsystem gone, or no longer linked to a port), not to compare one in
// full (ReadExport does that).
func (f *FS) Linked(ctx context.Context) (map[string]int, error) {
	subs, err := f.listDirs(f.subsystemsDir())
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(subs))
	for _, nqn := range subs {
		out[nqn] = 0
	}
	ports, err := f.listDirs(f.portsDir())
	if err != nil {
		return nil, err
	}
	for _, p := range ports {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		linked, err := f.listLinks(f.portDir(p)+"/subsystems", "subsystems")
		if IsNotExist(err) {
			continue // removed while we read
		}
		if err != nil {
			return nil, err
		}
		for _, nqn := range linked {
			if _, ok := out[nqn]; ok {
				out[nqn]++
			}
		}
	}
	return out, nil
}
