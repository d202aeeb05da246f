//go:build kernel

package kerneltest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pillar-csi/pillar-csi/configfs"
)

// Plain syscalls, so that the rules below are the kernel's, not the
// package's; they are the rules the package documentation states.

func mkdir(t testing.TB, path string) {
	t.Helper()
	if err := unix.Mkdir(path, 0o755); err != nil {
		t.Fatalf("mkdir %s: %v", path, err)
	}
}

func writeAttr(t testing.TB, path, value string) {
	t.Helper()
	if err := tryWrite(path, value); err != nil {
		t.Fatalf("write %q to %s: %v", value, path, err)
	}
}

func tryWrite(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(value))
	return err
}

func symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := unix.Symlink(target, link); err != nil {
		t.Fatalf("symlink %s -> %s: %v", link, target, err)
	}
}

func readAttr(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantErrno(t testing.TB, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: got %v, want %v (%s)", what, err, want, unix.ErrnoName(want))
	}
}

// TestKernelRules proves, one by one, the nvmet configfs rules the package
// relies on and documents.
func TestKernelRules(t *testing.T) {
	start(t)
	sub := nvmetDir + "/subsystems/" + subsysNQN(t, 1)
	ns := sub + "/namespaces/1"
	host := hostNQN()
	hostDir := nvmetDir + "/hosts/" + host
	port := nvmetDir + "/ports/4000"
	dev, dev2 := newLoop(t, 16), newLoop(t, 16)

	mkdir(t, sub)
	mkdir(t, ns)

	t.Run("mkdir creates default attributes and groups", func(t *testing.T) {
		for _, name := range []string{"attr_allow_any_host", "attr_version", "attr_serial", "attr_model",
			"attr_cntlid_min", "attr_cntlid_max", "attr_qid_max", "namespaces", "allowed_hosts"} {
			if _, err := os.Stat(sub + "/" + name); err != nil {
				t.Error(err)
			}
		}
		if got := readAttr(t, ns+"/device_path"); got != "(null)\n" {
			t.Errorf("new namespace device_path = %q, want the kernel's (null)", got)
		}
		if got := readAttr(t, sub+"/attr_cntlid_max"); got != "65519\n" {
			t.Errorf("attr_cntlid_max = %q", got)
		}
	})
	t.Run("reserved names", func(t *testing.T) {
		wantErrno(t, "mkdir of the discovery NQN", unix.Mkdir(nvmetDir+"/subsystems/nqn.2014-08.org.nvmexpress.discovery", 0o755), unix.EINVAL)
		wantErrno(t, "mkdir namespaces/0", unix.Mkdir(sub+"/namespaces/0", 0o755), unix.EINVAL)
		wantErrno(t, "mkdir namespaces/4294967295", unix.Mkdir(sub+"/namespaces/4294967295", 0o755), unix.EINVAL)
		wantErrno(t, "mkdir ports/65536", unix.Mkdir(nvmetDir+"/ports/65536", 0o755), unix.EINVAL)
		wantErrno(t, "mkdir in allowed_hosts", unix.Mkdir(sub+"/allowed_hosts/x", 0o755), unix.EPERM)
		wantErrno(t, "rmdir of a default group", unix.Rmdir(sub+"/namespaces"), unix.EPERM)
		wantErrno(t, "empty write", tryWrite(sub+"/attr_model", ""), unix.EFAULT)
	})
	t.Run("enable needs a device", func(t *testing.T) {
		wantErrno(t, "enable without device_path", tryWrite(ns+"/enable", "1"), unix.EINVAL)
		writeAttr(t, ns+"/device_path", "/dev/does-not-exist")
		wantErrno(t, "enable of a missing device", tryWrite(ns+"/enable", "1"), unix.ENOENT)
	})
	t.Run("namespace identity is fixed while enabled", func(t *testing.T) {
		writeAttr(t, ns+"/device_path", dev)
		writeAttr(t, ns+"/enable", "1")
		wantErrno(t, "device_path", tryWrite(ns+"/device_path", dev2), unix.EBUSY)
		wantErrno(t, "device_path, same value", tryWrite(ns+"/device_path", dev), unix.EBUSY)
		wantErrno(t, "device_uuid", tryWrite(ns+"/device_uuid", newUUID()), unix.EBUSY)
		wantErrno(t, "device_nguid", tryWrite(ns+"/device_nguid", randomHex(16)), unix.EBUSY)
		wantErrno(t, "buffered_io", tryWrite(ns+"/buffered_io", "0"), unix.EINVAL)
		if err := tryWrite(ns+"/ana_grpid", "2"); err != nil {
			t.Errorf("ana_grpid while enabled: %v", err)
		}
		writeAttr(t, ns+"/ana_grpid", "1")
		writeAttr(t, ns+"/enable", "0")
		writeAttr(t, ns+"/device_path", dev2)
		writeAttr(t, ns+"/enable", "1")
	})
	t.Run("subsystem attribute limits", func(t *testing.T) {
		wantErrno(t, "serial of 21 bytes", tryWrite(sub+"/attr_serial", "123456789012345678901"), unix.EINVAL)
		writeAttr(t, sub+"/attr_serial", "abc")
		if got := readAttr(t, sub+"/attr_serial"); got != "abc                 \n" {
			t.Errorf("serial reads back as %q; want it padded with spaces to 20 bytes", got)
		}
		wantErrno(t, "model of 41 bytes", tryWrite(sub+"/attr_model", "12345678901234567890123456789012345678901"), unix.EINVAL)
		writeAttr(t, sub+"/attr_version", "2.0.0")
		if got := readAttr(t, sub+"/attr_version"); got != "2.0\n" {
			t.Errorf("version 2.0.0 reads back as %q", got)
		}
		wantErrno(t, "qid_max 0", tryWrite(sub+"/attr_qid_max", "0"), unix.EINVAL)
		wantErrno(t, "qid_max 129", tryWrite(sub+"/attr_qid_max", "129"), unix.EINVAL)
		wantErrno(t, "cntlid_min 0", tryWrite(sub+"/attr_cntlid_min", "0"), unix.EINVAL)
		// min < max holds at every single write.
		writeAttr(t, sub+"/attr_cntlid_max", "200")
		wantErrno(t, "cntlid_min = max", tryWrite(sub+"/attr_cntlid_min", "200"), unix.EINVAL)
		wantErrno(t, "cntlid_max <= min", tryWrite(sub+"/attr_cntlid_max", "1"), unix.EINVAL)
		// sscanf("%hu") wraps: 70000 is stored as 4464, not refused.
		writeAttr(t, sub+"/attr_cntlid_max", "65519")
		writeAttr(t, sub+"/attr_cntlid_min", "70000")
		if got := readAttr(t, sub+"/attr_cntlid_min"); got != "4464\n" {
			t.Errorf("cntlid_min 70000 reads back as %q", got)
		}
		writeAttr(t, sub+"/attr_cntlid_min", "1")
	})
	t.Run("allowed hosts and allow_any_host exclude each other", func(t *testing.T) {
		mkdir(t, hostDir)
		symlink(t, hostDir, sub+"/allowed_hosts/"+host)
		wantErrno(t, "allow_any_host=1 with a host linked", tryWrite(sub+"/attr_allow_any_host", "1"), unix.EINVAL)
		wantErrno(t, "a second link to the same host", unix.Symlink(hostDir, sub+"/allowed_hosts/other"), unix.EEXIST)
		wantErrno(t, "rmdir of a linked host", unix.Rmdir(hostDir), unix.EBUSY)
		if err := unix.Unlink(sub + "/allowed_hosts/" + host); err != nil {
			t.Fatal(err)
		}
		writeAttr(t, sub+"/attr_allow_any_host", "1")
		wantErrno(t, "a host link while allow_any_host=1", unix.Symlink(hostDir, sub+"/allowed_hosts/"+host), unix.EINVAL)
		writeAttr(t, sub+"/attr_allow_any_host", "0")
	})
	t.Run("link targets resolve against the working directory; readlink is relative", func(t *testing.T) {
		rel := "../../../../nvmet/hosts/" + host
		wd, _ := os.Getwd()
		if err := os.Chdir("/"); err != nil {
			t.Fatal(err)
		}
		wantErrno(t, "relative target from /", unix.Symlink(rel, sub+"/allowed_hosts/"+host), unix.ENOENT)
		os.Chdir(wd)
		symlink(t, hostDir, sub+"/allowed_hosts/"+host)
		got, err := os.Readlink(sub + "/allowed_hosts/" + host)
		if err != nil || got != rel {
			t.Errorf("readlink = %q, %v; want %q", got, err, rel)
		}
		wantErrno(t, "a subsystem linked as a host", unix.Symlink(sub, sub+"/allowed_hosts/x"), unix.EINVAL)
	})
	t.Run("ports", func(t *testing.T) {
		mkdir(t, port)
		if got := readAttr(t, port+"/param_inline_data_size"); got != "-1\n" {
			t.Errorf("new port inline data size %q", got)
		}
		wantErrno(t, "link to a port without an address", unix.Symlink(sub, port+"/subsystems/s"), unix.EINVAL)
		wantErrno(t, "trtype udp", tryWrite(port+"/addr_trtype", "udp"), unix.EINVAL)
		writeAttr(t, port+"/addr_trtype", "tcp")
		writeAttr(t, port+"/addr_adrfam", "ipv4")
		writeAttr(t, port+"/addr_traddr", "127.0.0.1")
		writeAttr(t, port+"/addr_trsvcid", freePort())
		symlink(t, sub, port+"/subsystems/s")
		got, err := os.Readlink(port + "/subsystems/s")
		if want := "../../../../nvmet/subsystems/" + filepath.Base(sub); err != nil || got != want {
			t.Errorf("readlink of a port link = %q, %v; want %q", got, err, want)
		}
		wantErrno(t, "a second link to the same subsystem", unix.Symlink(sub, port+"/subsystems/again"), unix.EEXIST)
		for _, a := range []string{"addr_trsvcid", "addr_traddr", "addr_adrfam", "addr_trtype", "addr_treq", "param_inline_data_size"} {
			old := readAttr(t, port+"/"+a)
			wantErrno(t, a+" while a subsystem is linked (same value)", tryWrite(port+"/"+a, old[:len(old)-1]), unix.EACCES)
		}
		if got := readAttr(t, port+"/param_inline_data_size"); got == "-1\n" {
			t.Error("nvmet-tcp did not set the inline data size when the port was enabled")
		}
		wantErrno(t, "rmdir of a linked subsystem", unix.Rmdir(sub), unix.EBUSY)
		wantErrno(t, "rmdir of a port with a link", unix.Rmdir(port), unix.ENOTEMPTY)

		// Two ports on one address: the second cannot bind.
		p2 := nvmetDir + "/ports/4001"
		mkdir(t, p2)
		for _, a := range []string{"addr_trtype", "addr_adrfam", "addr_traddr", "addr_trsvcid"} {
			v := readAttr(t, port+"/"+a)
			writeAttr(t, p2+"/"+a, v[:len(v)-1])
		}
		sub2 := sub + "-2"
		mkdir(t, sub2)
		wantErrno(t, "a second port on the same address", unix.Symlink(sub2, p2+"/subsystems/s2"), unix.EADDRINUSE)
		writeAttr(t, p2+"/addr_traddr", "192.0.2.1")
		wantErrno(t, "a port on an address the host lacks", unix.Symlink(sub2, p2+"/subsystems/s2"), unix.EADDRNOTAVAIL)

		// A referral or an extra ANA group keeps an unlinked port busy.
		if err := unix.Unlink(port + "/subsystems/s"); err != nil {
			t.Fatal(err)
		}
		mkdir(t, port+"/referrals/r")
		wantErrno(t, "rmdir of a port with a referral", unix.Rmdir(port), unix.ENOTEMPTY)
		unix.Rmdir(port + "/referrals/r")
		wantErrno(t, "mkdir of the default ANA group", unix.Mkdir(port+"/ana_groups/1", 0o755), unix.EEXIST)
		mkdir(t, port+"/ana_groups/2")
		wantErrno(t, "rmdir of a port with an extra ANA group", unix.Rmdir(port), unix.ENOTEMPTY)
		unix.Rmdir(port + "/ana_groups/2")
		wantErrno(t, "rmdir of the default ANA group", unix.Rmdir(port+"/ana_groups/1"), unix.EPERM)
		if err := unix.Rmdir(port); err != nil {
			t.Errorf("rmdir of an unused port: %v", err)
		}
	})
	t.Run("a subsystem with children cannot go; an enabled namespace can", func(t *testing.T) {
		wantErrno(t, "rmdir of a subsystem with a namespace and a host link", unix.Rmdir(sub), unix.ENOTEMPTY)
		if err := unix.Rmdir(ns); err != nil {
			t.Errorf("rmdir of an enabled namespace: %v", err)
		}
		unix.Unlink(sub + "/allowed_hosts/" + host)
		if err := unix.Rmdir(sub); err != nil {
			t.Errorf("rmdir of an empty subsystem: %v", err)
		}
	})
}

// After an initiator has identified the controller, the kernel refuses any
// write of attr_serial, attr_model and attr_version, even of the value
// they already have; attr_cntlid_min and allow_any_host stay writable.
func TestKernelRuleIdentityFixedAfterConnect(t *testing.T) {
	fs, ctx := start(t)
	e := simpleExport(subsysNQN(t, 1), newLoop(t, 16), loopback(freePort()))
	e.Attrs.Serial, e.Attrs.Model = "fixed1", "pillar-csi"
	mustApply(t, fs, ctx, e)
	sub := nvmetDir + "/subsystems/" + e.NQN
	mustConnect(t, e.Ports[0], e.NQN, hostNQN())
	wantErrno(t, "serial, same value", tryWrite(sub+"/attr_serial", "fixed1"), unix.EINVAL)
	wantErrno(t, "model, same value", tryWrite(sub+"/attr_model", "pillar-csi"), unix.EINVAL)
	wantErrno(t, "version, same value", tryWrite(sub+"/attr_version", "1.3"), unix.EINVAL)
	if err := tryWrite(sub+"/attr_cntlid_min", "2"); err != nil {
		t.Errorf("cntlid_min after connect: %v", err)
	}
	// And the package's error for a real change says which attribute.
	e.Attrs.Serial = "changed"
	err := fs.Apply(ctx, e)
	if err == nil || !isErrno(err, unix.EINVAL) {
		t.Errorf("Apply changing the serial of a connected subsystem = %v, want EINVAL", err)
	}
}

// nvmet accepts subsystem names of any length, but the Linux initiator
// refuses NQNs of 223 bytes or more: 222 bytes is the longest usable NQN,
// and the limit ValidateNQN enforces.
func TestKernelRuleLongestUsableNQN(t *testing.T) {
	start(t)
	prefix := "nqn.2024-01.io.pillar-csi.kerneltest:"
	addr := loopback(freePort())
	port := nvmetDir + "/ports/4002"
	mkdir(t, port)
	writeAttr(t, port+"/addr_trtype", addr.TrType)
	writeAttr(t, port+"/addr_adrfam", addr.AdrFam)
	writeAttr(t, port+"/addr_traddr", addr.TrAddr)
	writeAttr(t, port+"/addr_trsvcid", addr.TrSvcID)
	dev := newLoop(t, 16)
	for _, n := range []int{222, 223, 250} {
		nqn := prefix + strings.Repeat("x", n-len(prefix))
		sub := nvmetDir + "/subsystems/" + nqn
		mkdir(t, sub) // accepted whatever the length
		mkdir(t, sub+"/namespaces/1")
		writeAttr(t, sub+"/namespaces/1/device_path", dev)
		writeAttr(t, sub+"/namespaces/1/enable", "1")
		writeAttr(t, sub+"/attr_allow_any_host", "1")
		symlink(t, sub, port+"/subsystems/"+strconv.Itoa(n))
		c, err := connect(addr, nqn, hostNQN())
		switch {
		case n <= configfs.MaxNQNLen && err != nil:
			t.Errorf("connect to a %d-byte NQN: %v", n, err)
		case n > configfs.MaxNQNLen:
			wantErrno(t, fmt.Sprintf("connect to a %d-byte NQN", n), err, unix.EINVAL)
		}
		if c != nil {
			c.disconnect()
		}
		if ok := configfs.ValidateNQN(nqn) == nil; ok != (n <= configfs.MaxNQNLen) {
			t.Errorf("ValidateNQN of a %d-byte NQN accepts: %v", n, ok)
		}
	}
}
