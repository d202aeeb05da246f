package configfs

import (
	"strings"
)

// nvmetCntlIDMax is the kernel's default attr_cntlid_max (NVME_CNTLID_MAX).
const nvmetCntlIDMax = 0xffef

// applySubsystemAttrs writes the attributes of want that differ from cur.
// fresh means the directory was just created, so cur holds nothing and the
// kernel defaults apply. AllowAnyHost is left to applyAccess, which must
// order it against the allowed_hosts links.
func (f *FS) applySubsystemAttrs(nqn string, want, cur SubsystemAttrs, fresh bool) error {
	dir := f.subsystemDir(nqn)
	set := func(name string, differs bool, value string) error {
		if !fresh && !differs {
			// Never rewrite an equal value: attr_serial, attr_model
			// and attr_version refuse any write (EINVAL) once an
			// initiator has identified the controller, even a write
			// of the same value.
			return nil
		}
		return f.sys.writeAttr(dir+"/"+name, value)
	}
	if want.Version != "" {
		if err := set("attr_version", want.Version != cur.Version, want.Version); err != nil {
			return err
		}
	}
	if want.Serial != "" {
		if err := set("attr_serial", want.Serial != cur.Serial, want.Serial); err != nil {
			return err
		}
	}
	if want.Model != "" {
		if err := set("attr_model", want.Model != cur.Model, want.Model); err != nil {
			return err
		}
	}
	if err := f.applyCntlIDs(dir, want, cur, fresh); err != nil {
		return err
	}
	if want.QIDMax != 0 {
		if err := set("attr_qid_max", want.QIDMax != cur.QIDMax, uitoa(uint64(want.QIDMax))); err != nil {
			return err
		}
	}
	// attr_pi_enable only exists with CONFIG_BLK_DEV_INTEGRITY; a kernel
	// without it reads as false, so only asking for true can fail there.
	if want.PIEnable != cur.PIEnable {
		if err := f.sys.writeAttr(dir+"/attr_pi_enable", formatBool(want.PIEnable)); err != nil {
			return err
		}
	}
	return nil
}

// applyCntlIDs writes attr_cntlid_min and attr_cntlid_max. The kernel keeps
// min < max at every single write (EINVAL otherwise), so when the new
// minimum is not below the current maximum the maximum goes first.
func (f *FS) applyCntlIDs(dir string, want, cur SubsystemAttrs, fresh bool) error {
	if fresh {
		cur.CntlIDMin, cur.CntlIDMax = 1, nvmetCntlIDMax
	}
	type write struct {
		name  string
		value uint16
	}
	var writes []write
	if want.CntlIDMin != 0 && want.CntlIDMin != cur.CntlIDMin {
		writes = append(writes, write{"attr_cntlid_min", want.CntlIDMin})
	}
	if want.CntlIDMax != 0 && want.CntlIDMax != cur.CntlIDMax {
		w := write{"attr_cntlid_max", want.CntlIDMax}
		if want.CntlIDMin >= cur.CntlIDMax {
			writes = append([]write{w}, writes...)
		} else {
			writes = append(writes, w)
		}
	}
	for _, w := range writes {
		if err := f.sys.writeAttr(dir+"/"+w.name, uitoa(uint64(w.value))); err != nil {
			return err
		}
	}
	return nil
}

// dirNames are the names of the links and directories of a subsystem Apply
// must address, which other tools may have chosen otherwise than Apply
// does.
type dirNames struct {
	// hosts maps each allowed host to the name of its link under
	// allowed_hosts.
	hosts map[string]string
	// namespaces maps each NSID to the name of its directory: the kernel
	// takes "0x10" and "16" alike as namespace 16.
	namespaces map[uint32]string
	// extraNamespaces are directories that repeat the NSID of another
	// directory (the one namespaces names); they are removed.
	extraNamespaces []string
}

// nsDir returns the directory name of namespace nsid: the one found, or the
// decimal NSID for a namespace still to be made.
func (d dirNames) nsDir(nsid uint32) string {
	if name, ok := d.namespaces[nsid]; ok {
		return name
	}
	return uitoa(uint64(nsid))
}

// readForApply reads what Apply compares for want and nothing more: every
// attribute read costs three system calls, and an identical re-Apply is
// made of nothing but reads. Attributes want leaves at zero are not read
// (and stay zero in the result); namespaces want does not list are only
// named, for removal. ok is false when the subsystem does not exist.
func (f *FS) readForApply(want Export) (cur Subsystem, names dirNames, ok bool, err error) {
	dir := f.subsystemDir(want.NQN)
	cur.NQN = want.NQN
	// attr_allow_any_host exists on every kernel and is always needed; its
	// absence means the subsystem is gone.
	v, err := f.sys.readAttr(dir + "/attr_allow_any_host")
	if IsNotExist(err) {
		return cur, names, false, nil
	}
	if err != nil {
		return cur, names, false, err
	}
	a := f.probeAttrs(dir)
	if cur.Attrs.AllowAnyHost, err = parseBool(strings.TrimSuffix(v, "\n")); err != nil {
		return cur, names, false, &Error{Op: "parse", Path: dir + "/attr_allow_any_host", Err: err}
	}
	w := want.Attrs
	if w.Version != "" {
		cur.Attrs.Version = a.str("attr_version")
	}
	if w.Serial != "" {
		cur.Attrs.Serial = strings.TrimRight(a.str("attr_serial"), " ")
	}
	if w.Model != "" {
		cur.Attrs.Model = a.str("attr_model")
	}
	if w.CntlIDMin != 0 || w.CntlIDMax != 0 {
		cur.Attrs.CntlIDMin = uint16(a.uint("attr_cntlid_min", 16))
		cur.Attrs.CntlIDMax = uint16(a.uint("attr_cntlid_max", 16))
	}
	if w.QIDMax != 0 {
		cur.Attrs.QIDMax = uint16(a.uint("attr_qid_max", 16))
	}
	cur.Attrs.PIEnable = a.boolean("attr_pi_enable")
	if a.err != nil {
		return cur, names, false, a.err
	}

	nsNames, err := f.listDirs(dir + "/namespaces")
	if err != nil {
		return cur, names, false, err
	}
	wanted := make(map[uint32]Namespace, len(want.Namespaces))
	for _, ns := range want.Namespaces {
		wanted[ns.NSID] = ns
	}
	names.namespaces = make(map[uint32]string, len(nsNames))
	for _, name := range nsNames {
		n, err := parseID(name, 32)
		if err != nil {
			continue
		}
		nsid := uint32(n)
		if other, dup := names.namespaces[nsid]; dup {
			// Two directories for one NSID: keep the one named as
			// Apply names it, else the first in name order.
			if name == uitoa(n) {
				names.namespaces[nsid], name = name, other
			}
			names.extraNamespaces = append(names.extraNamespaces, name)
			continue
		}
		names.namespaces[nsid] = name
	}
	for _, name := range nsNames {
		n, err := parseID(name, 32)
		if err != nil || names.namespaces[uint32(n)] != name {
			continue
		}
		w, ok := wanted[uint32(n)]
		if !ok {
			cur.Namespaces = append(cur.Namespaces, Namespace{NSID: uint32(n)})
			continue
		}
		ns, err := f.readNamespaceForApply(dir+"/namespaces/"+name, w)
		if err != nil {
			return cur, names, false, err
		}
		cur.Namespaces = append(cur.Namespaces, ns)
	}

	links, err := f.readLinks(dir+"/allowed_hosts", "hosts")
	if err != nil {
		return cur, names, false, err
	}
	names.hosts = make(map[string]string, len(links))
	for _, l := range links {
		cur.AllowedHosts = append(cur.AllowedHosts, l.target)
		names.hosts[l.target] = l.name
	}
	return cur, names, true, nil
}
