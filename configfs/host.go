package configfs

import "slices"

// applyAccess converges attr_allow_any_host and the allowed_hosts links.
//
// nvmet refuses a link under allowed_hosts while attr_allow_any_host is 1,
// and refuses attr_allow_any_host=1 while links exist (EINVAL both ways).
// So opening up removes the links first, and closing down writes 0 before
// linking. When the list changes with the ACL on, new hosts are linked
// before old ones are unlinked, so a host that stays allowed is never
// refused in between. Unlinking a host does not disconnect a controller it
// already has: nvmet checks the list only when a host connects (Apply
// drops the port links around a narrowing for that; see revoking).
//
// linkNames maps each current host to the name of its link (Apply names
// links after hosts; other tools may not).
func (f *FS) applyAccess(nqn string, want Export, cur Subsystem, linkNames map[string]string, fresh bool) error {
	dir := f.subsystemDir(nqn)
	if want.Attrs.AllowAnyHost {
		for _, h := range cur.AllowedHosts {
			if err := f.unlinkHost(nqn, h, linkNames[h]); err != nil {
				return err
			}
		}
		if fresh || !cur.Attrs.AllowAnyHost {
			return f.sys.writeAttr(dir+"/attr_allow_any_host", "1")
		}
		return nil
	}
	if !fresh && cur.Attrs.AllowAnyHost {
		if err := f.sys.writeAttr(dir+"/attr_allow_any_host", "0"); err != nil {
			return err
		}
	}
	for _, h := range want.AllowedHosts {
		if slices.Contains(cur.AllowedHosts, h) {
			continue
		}
		if err := f.linkHost(nqn, h); err != nil {
			return err
		}
	}
	for _, h := range cur.AllowedHosts {
		if slices.Contains(want.AllowedHosts, h) {
			continue
		}
		if err := f.unlinkHost(nqn, h, linkNames[h]); err != nil {
			return err
		}
	}
	return nil
}

// narrows says whether want refuses a host that cur admits: a host is
// unlisted, or the access list is switched on. Only then can a host hold
// a controller it would now be refused.
func narrows(want Export, cur Subsystem) bool {
	switch {
	case want.Attrs.AllowAnyHost:
		return false
	case cur.Attrs.AllowAnyHost:
		return true
	}
	return slices.ContainsFunc(cur.AllowedHosts, func(h string) bool { return !slices.Contains(want.AllowedHosts, h) })
}

// linkHost creates hosts/<host> if needed and links it into the
// subsystem's allowed_hosts. The host lock keeps a concurrent unlinkHost of
// another subsystem from removing the host between the two steps.
func (f *FS) linkHost(nqn, host string) error {
	unlock := f.hosts.lock(host)
	defer unlock()
	if err := f.sys.mkdir(f.hostDir(host)); err != nil && !IsExist(err) {
		return err
	}
	// The target must be absolute: configfs resolves a symlink target
	// against the calling process's working directory, not against the
	// directory of the link.
	err := f.sys.symlink(f.hostDir(host), f.allowedHostLink(nqn, host))
	if IsExist(err) {
		return nil
	}
	return err
}

// unlinkHost removes the subsystem's link to host (named linkName, or after
// the host when "") and then the host entry itself unless another subsystem
// still links it (the kernel refuses the rmdir of a link target with EBUSY;
// that is the usage check).
func (f *FS) unlinkHost(nqn, host, linkName string) error {
	if linkName == "" {
		linkName = host
	}
	unlock := f.hosts.lock(host)
	defer unlock()
	if err := f.sys.unlink(f.allowedHostLink(nqn, linkName)); err != nil && !IsNotExist(err) {
		return err
	}
	return f.removeIfUnused(f.hostDir(host))
}

// removeIfUnused removes a host or port directory unless the kernel says it
// is still in use: EBUSY for a link target, ENOTEMPTY for a group with
// children (a port's subsystem links, referrals or extra ANA groups).
func (f *FS) removeIfUnused(dir string) error {
	err := f.sys.rmdir(dir)
	if err == nil || IsNotExist(err) || IsBusy(err) {
		return nil
	}
	return err
}
