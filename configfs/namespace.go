package configfs

import (
	"context"
	"errors"
	"syscall"
	"time"
)

// applyNamespaces makes the subsystem's namespaces equal to want (sorted by
// NSID): new ones are created, changed ones rewritten, others removed.
// names gives the directory of each current namespace.
func (f *FS) applyNamespaces(ctx context.Context, nqn string, want, cur []Namespace, names dirNames) error {
	// A directory repeating an NSID goes first: it may hold the NSID
	// enabled, and the kernel refuses to enable a second namespace with
	// the same NSID.
	for _, name := range names.extraNamespaces {
		if err := f.sys.rmdir(f.namespaceDir(nqn, name)); err != nil && !IsNotExist(err) {
			return err
		}
	}
	have := make(map[uint32]*Namespace, len(cur))
	for i := range cur {
		have[cur[i].NSID] = &cur[i]
	}
	for _, ns := range want {
		if err := f.applyNamespace(ctx, nqn, names.nsDir(ns.NSID), ns, have[ns.NSID]); err != nil {
			return err
		}
		delete(have, ns.NSID)
	}
	for _, c := range cur {
		if _, stale := have[c.NSID]; !stale {
			continue
		}
		// rmdir of an enabled namespace is allowed: its release
		// callback disables it first (nvmet_ns_free).
		if err := f.sys.rmdir(f.namespaceDir(nqn, names.nsDir(c.NSID))); err != nil && !IsNotExist(err) {
			return err
		}
	}
	return nil
}

// applyNamespace converges one namespace, in namespaces/<name>. cur is nil
// when it does not exist.
//
// device_path, device_uuid and device_nguid refuse writes while the
// namespace is enabled (EBUSY), and buffered_io too (EINVAL), so changing
// any of them on an enabled namespace disables it for the duration of the
// writes. ana_grpid can change while enabled. Nothing is written when
// nothing differs, so an identical Apply leaves I/O undisturbed.
func (f *FS) applyNamespace(ctx context.Context, nqn, name string, want Namespace, cur *Namespace) error {
	dir := f.namespaceDir(nqn, name)
	if cur == nil {
		err := f.sys.mkdir(dir)
		switch {
		case IsExist(err):
			// Created behind our back since the subsystem was read.
			ns, ok, rerr := f.readNamespace(dir, want.NSID)
			if rerr != nil {
				return rerr
			}
			if ok {
				cur = &ns
			}
		case err != nil:
			return err
		}
	}
	fresh := cur == nil
	if fresh {
		// A new namespace starts with an empty path, zero IDs, group
		// 1, buffered_io 0 and enable 0.
		cur = &Namespace{NSID: want.NSID, ANAGroupID: 1}
	}
	immutableDiffers := want.DevicePath != cur.DevicePath ||
		(want.DeviceUUID != "" && want.DeviceUUID != cur.DeviceUUID) ||
		(want.DeviceNGUID != "" && want.DeviceNGUID != cur.DeviceNGUID) ||
		want.BufferedIO != cur.BufferedIO
	enabled := cur.Enabled
	if enabled && immutableDiffers {
		if err := f.sys.writeAttr(dir+"/enable", "0"); err != nil {
			return err
		}
		enabled = false
	}
	if want.DevicePath != cur.DevicePath {
		if err := f.sys.writeAttr(dir+"/device_path", want.DevicePath); err != nil {
			return err
		}
	}
	if want.DeviceUUID != "" && want.DeviceUUID != cur.DeviceUUID {
		if err := f.sys.writeAttr(dir+"/device_uuid", want.DeviceUUID); err != nil {
			return err
		}
	}
	if want.DeviceNGUID != "" && want.DeviceNGUID != cur.DeviceNGUID {
		if err := f.sys.writeAttr(dir+"/device_nguid", want.DeviceNGUID); err != nil {
			return err
		}
	}
	if want.BufferedIO != cur.BufferedIO {
		if err := f.sys.writeAttr(dir+"/buffered_io", formatBool(want.BufferedIO)); err != nil {
			return err
		}
	}
	if want.ANAGroupID != 0 && want.ANAGroupID != cur.ANAGroupID {
		if err := f.sys.writeAttr(dir+"/ana_grpid", uitoa(uint64(want.ANAGroupID))); err != nil {
			return err
		}
	}
	if want.Enabled != enabled {
		// Enabling opens device_path (a block device, else a regular
		// file); a missing or busy device fails here, leaving the
		// namespace configured but disabled for the next Apply.
		if !want.Enabled {
			return f.sys.writeAttr(dir+"/enable", "0")
		}
		return f.enable(ctx, dir)
	}
	return nil
}

// enableRetryFor bounds how long enable tries a namespace's enable again
// while it fails with ENOENT or ENXIO.
const enableRetryFor = 2 * time.Second

// enable enables the namespace in dir. A new zvol's device can vanish
// for a moment just after it was found: ZFS 2.1 makes the device of a
// zvol created with a volmode, then removes it and makes it again when it
// applies the volmode (seen in the lab: a burst of 10 zfs create -o
// volmode=dev, each device opened as soon as it answered its name, 19
// devices made a second time, each under the same minor and a new
// diskseq). An open in between fails with ENXIO (the disk being removed),
// ENOENT (its node gone) or EBUSY. ENOENT and ENXIO are tried again,
// after pauses from 10 ms doubling to 200 ms, for at most enableRetryFor
// and no longer than ctx lasts; the last error is returned. ERESTARTSYS is
// tried again one level down (retry), for every write.
func (f *FS) enable(ctx context.Context, dir string) error {
	err := f.sys.writeAttr(dir+"/enable", "1")
	for wait, waited := 10*time.Millisecond, time.Duration(0); deviceComing(err) && waited < enableRetryFor; wait = min(2*wait, 200*time.Millisecond) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		waited += wait
		err = f.sys.writeAttr(dir+"/enable", "1")
	}
	return err
}

// deviceComing tells whether an enable failed because its device is
// between being removed and made again (see enable).
func deviceComing(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENXIO)
}

// readNamespaceForApply reads the attributes applyNamespace compares for
// want (see readForApply).
func (f *FS) readNamespaceForApply(dir string, want Namespace) (Namespace, error) {
	a := f.probeAttrs(dir)
	ns := Namespace{
		NSID:       want.NSID,
		DevicePath: a.str("device_path"),
		BufferedIO: a.boolean("buffered_io"),
		Enabled:    a.boolean("enable"),
	}
	if ns.DevicePath == "(null)" {
		ns.DevicePath = ""
	}
	if want.DeviceUUID != "" {
		ns.DeviceUUID = clearZero(a.str("device_uuid"))
	}
	if want.DeviceNGUID != "" {
		ns.DeviceNGUID = clearZero(a.str("device_nguid"))
	}
	if want.ANAGroupID != 0 {
		ns.ANAGroupID = uint32(a.uint("ana_grpid", 32))
	}
	return ns, a.err
}
