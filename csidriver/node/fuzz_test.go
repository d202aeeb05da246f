package node

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
)

// blkidRunner answers blkid with a fixed output and exit status and
// records every other command (mkfs) it is asked to run.
type blkidRunner struct {
	out   string
	exit  int
	calls []string
}

func (r *blkidRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	if name != "blkid" {
		r.calls = append(r.calls, strings.Join(append([]string{name}, args...), " "))
		return nil, nil
	}
	if r.exit != 0 {
		return []byte(r.out), &command.Error{Cmd: append([]string{name}, args...), ExitCode: r.exit, Err: errors.New("exit status")}
	}
	return []byte(r.out), nil
}

// FuzzProbe gives the filesystem probe arbitrary blkid output and exit
// statuses. The rule it keeps is the one that protects a volume's data:
// a device is formatted only when blkid exited 2 (no signature at all)
// and the access mode writes; any output of a successful blkid, however
// garbled, is never taken for a blank device. A device is used as it is
// only when blkid named the requested filesystem in its last TYPE line.
func FuzzProbe(f *testing.F) {
	dev := "/dev/nvme7n1"
	f.Add("DEVNAME="+dev+"\nUUID=1b4e28ba-2fa1-11d2-883f-0016d3cca427\nVERSION=1.0\nBLOCK_SIZE=4096\nTYPE=ext4\nUSAGE=filesystem\n", uint8(0), false, false)
	f.Add("DEVNAME="+dev+"\nUUID=0f2d1e8a-7c4b-4e55-9c1a-3d2b1a0f9e8d\nBLOCK_SIZE=512\nTYPE=xfs\nUSAGE=filesystem\n", uint8(0), true, false)
	f.Add("DEVNAME="+dev+"\nPTUUID=5a3f7c2e-9b1d-4e6a-8c0f-2d4b6e8a1c3f\nPTTYPE=gpt\n", uint8(0), false, false)
	f.Add("", uint8(2), false, false)
	f.Add("", uint8(2), true, true)
	f.Add("", uint8(0), false, false)
	f.Add("DEVNAME="+dev+"\n", uint8(0), false, false)
	f.Add("TYPE=\nPTTYPE=\n", uint8(0), false, false)
	f.Add("  TYPE=ext4  \r\nTYPE=xfs", uint8(0), false, false)
	f.Add("TYPE = ext4\n", uint8(0), false, false)
	f.Add("DEVNAME="+dev+"\nambivalent result (probably more filesystems on the device, use wipefs(8) to see more details)", uint8(8), false, false)
	f.Add("", uint8(4), false, false)
	f.Fuzz(func(t *testing.T, out string, exit uint8, xfs, readOnly bool) {
		fsType := "ext4"
		if xfs {
			fsType = "xfs"
		}
		r := &blkidRunner{out: out, exit: int(exit)}
		s := &Service{run: r}
		formatted, err := s.prepareFilesystem(context.Background(), dev, fsType, readOnly)
		blank := exit == 2
		switch {
		case formatted != (len(r.calls) > 0):
			t.Fatalf("formatted %v, yet commands %q", formatted, r.calls)
		case len(r.calls) > 0 && (!blank || readOnly || len(r.calls) > 1 || !strings.HasPrefix(r.calls[0], "mkfs."+fsType+" ")):
			t.Fatalf("blkid exit %d, output %q, read-only %v: ran %q", exit, out, readOnly, r.calls)
		case blank && !readOnly && (err != nil || !formatted):
			t.Fatalf("blank device, read-write: formatted %v, %v", formatted, err)
		case blank && readOnly && status.Code(err) != codes.FailedPrecondition:
			t.Fatalf("blank device, read-only: %v, want FailedPrecondition", err)
		case !blank && err == nil && lastType(out) != fsType:
			t.Fatalf("blkid exit %d, output %q: used as %s", exit, out, fsType)
		}
	})
}

// lastType is the value of the last TYPE line of blkid -o export output.
func lastType(out string) string {
	v := ""
	for _, line := range strings.Split(out, "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "TYPE="); ok {
			v = t
		}
	}
	return v
}

// FuzzMountArgs turns arbitrary option lists (one option a line) into
// mount(2) arguments. mount(8)'s own options are refused, and only they;
// every option that is not a flag goes to the filesystem unchanged and in
// order; every flag bit is the one the last option naming it sets; and an
// option list ending in "ro", as the stage of a read-only volume ends,
// mounts read-only whatever came before it.
func FuzzMountArgs(f *testing.F) {
	f.Add("discard\nnoatime\nerrors=remount-ro")
	f.Add("ro\nrw")
	f.Add("rbind\nnosuid\nnodev\nnoexec\nremount")
	f.Add("rw\nsuid\ndev\nexec\nro")
	f.Add("nofail")
	f.Add("x-systemd.automount\nX-mount.mkdir")
	f.Add("defaults\n\nuid=0,gid=0")
	f.Add("")
	f.Fuzz(func(t *testing.T, list string) {
		opts := strings.Split(list, "\n")
		flags, data, err := mountArgs(opts)
		own := slices.ContainsFunc(opts, func(o string) bool {
			return slices.Contains(fstabOnlyOptions, o) || strings.HasPrefix(o, "x-") || strings.HasPrefix(o, "X-")
		})
		if own != (err != nil) {
			t.Fatalf("mountArgs(%q): %v", opts, err)
		}
		if err != nil {
			return
		}
		var fsOpts []string
		var all uintptr
		for _, o := range opts {
			if _, ok := mountFlagOptions[o]; !ok {
				fsOpts = append(fsOpts, o)
			}
		}
		for _, fl := range mountFlagOptions {
			all |= fl.flags
		}
		if data != strings.Join(fsOpts, ",") || flags&^all != 0 {
			t.Fatalf("mountArgs(%q) = %#x, %q", opts, flags, data)
		}
		for bit := uintptr(1); bit != 0 && bit <= all; bit <<= 1 {
			want := false
			for _, o := range opts {
				if fl, ok := mountFlagOptions[o]; ok && fl.flags&bit != 0 {
					want = !fl.clear
				}
			}
			if want != (flags&bit != 0) {
				t.Fatalf("mountArgs(%q) = %#x: bit %#x should be %v", opts, flags, bit, want)
			}
		}
		if ro, _, _ := mountArgs(append(opts, "ro")); ro&unix.MS_RDONLY == 0 {
			t.Fatalf("mountArgs(%q + ro) = %#x, not read-only", opts, ro)
		}
	})
}

// FuzzMountFlags gives validCapability a capability with arbitrary mount
// flags, which come from a StorageClass or a PersistentVolume, and
// stages what it accepts through the mounter. An accepted capability
// stages with one mount(2) of the device, never a bind, move, remount or
// propagation change, read-only for a reader-only access mode, and with
// nothing in the filesystem data that is not one of the flags as given.
// What it refuses is InvalidArgument.
func FuzzMountFlags(f *testing.F) {
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), "ext4", false, uint8(2), "noatime", "discard", "")
	f.Add(int32(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY), "xfs", false, uint8(3), "rw", "nouuid", "logbufs=8")
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY), "", false, uint8(1), "errors=remount-ro", "", "")
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER), "ext4", false, uint8(3), "bind", "rbind", "remount")
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), "ext4", false, uint8(2), "noatime,bind", "nofail", "")
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), "ext4", false, uint8(1), "x-mount.mkdir", "", "")
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), "btrfs", false, uint8(0), "", "", "")
	f.Add(int32(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER), "ext4", true, uint8(0), "", "", "")
	f.Add(int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), "ext4", false, uint8(1), "nosuid\tdev", "", "")
	f.Fuzz(func(t *testing.T, mode int32, fsType string, block bool, n uint8, f1, f2, f3 string) {
		flags := []string{f1, f2, f3}[:n%4]
		c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_Mode(mode)}}
		if block {
			c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		} else {
			c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}}
		}
		got, err := validCapability(c)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("refused with %v, not InvalidArgument", err)
			}
			return
		}
		if got.readOnly != slices.Contains(readOnlyModes, c.AccessMode.Mode) || !slices.Contains(supportedModes, c.AccessMode.Mode) {
			t.Fatalf("mode %v accepted as %+v", c.AccessMode.Mode, got)
		}
		if block {
			return
		}
		if c.AccessMode.Mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
			t.Fatalf("a filesystem accepted for writers on several nodes: %+v", got)
		}
		if !slices.Contains(FsTypes, got.fsType) || (fsType != "" && got.fsType != fsType) || !slices.Equal(got.mountFlags, flags) {
			t.Fatalf("fs_type %q, flags %q accepted as %+v", fsType, flags, got)
		}

		// NodeStage's mount of the device, as stageMount builds it.
		opts := slices.Clone(got.mountFlags)
		if got.readOnly {
			opts = append(opts, "ro")
		}
		type call struct {
			source, target, fstype string
			flags                  uintptr
			data                   string
		}
		var calls []call
		m := timedMounter{timeout: DefaultMountTimeout,
			statfs: func(string, *unix.Statfs_t) error { return errors.New("statfs: not expected") },
			sysMount: func(source, target, fstype string, flags uintptr, data string) error {
				calls = append(calls, call{source, target, fstype, flags, data})
				return nil
			},
			sysUnmount: func(string, int) error { return errors.New("umount: not expected") },
		}
		dev, staging := "/dev/nvme7n1", "/var/lib/kubelet/plugins/kubernetes.io/csi/pillar-csi.io/x/globalmount"
		if err := m.Mount(dev, staging, got.fsType, opts); err != nil {
			t.Fatalf("flags %q: stage mount: %v", flags, err)
		}
		const forbidden = unix.MS_BIND | unix.MS_REC | unix.MS_REMOUNT | unix.MS_MOVE | unix.MS_SHARED | unix.MS_PRIVATE | unix.MS_SLAVE | unix.MS_UNBINDABLE
		if len(calls) != 1 || calls[0].source != dev || calls[0].target != staging || calls[0].fstype != got.fsType || calls[0].flags&forbidden != 0 {
			t.Fatalf("flags %q: mount(2) calls %+v", flags, calls)
		}
		if got.readOnly && calls[0].flags&unix.MS_RDONLY == 0 {
			t.Fatalf("flags %q, read-only mode: mounted %#x", flags, calls[0].flags)
		}
		if calls[0].data != "" {
			for _, d := range strings.Split(calls[0].data, ",") {
				if !slices.Contains(flags, d) {
					t.Fatalf("flags %q: filesystem data %q has %q", flags, calls[0].data, d)
				}
			}
		}
	})
}

// FuzzReadHostIdentity reads arbitrary host NQN and host ID files. What
// it accepts is the files' content without surrounding white space, a
// valid NQN and a UUID (or no host ID when the file is absent); and once
// pillar-node has also accepted the NQN (New, through its node ID), the
// connect options it writes to /dev/nvme-fabrics carry exactly the
// options they name: no file content can add one.
func FuzzReadHostIdentity(f *testing.F) {
	f.Add("nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11\n", "6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11\n", false)
	f.Add("nqn.2014-08.org.nvmexpress:uuid:6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11", "", true)
	f.Add("nqn.2014-08.org.nvmexpress:uuid:x,traddr=203.0.113.9", "6B6F3A52-7C1E-4A0E-9A55-4D6D0C2F5A11", false)
	f.Add("  nqn.2014-08.org.example:host=1\r\n", "6b6f3a52-7c1e-4a0e-9a55-4d6d0c2f5a11,hostnqn=x", false)
	f.Add("", "", false)
	// One directory, rewritten for each input: the inputs of a fuzzing
	// process run one at a time.
	dir := f.TempDir()
	nqnPath, idPath := filepath.Join(dir, "hostnqn"), filepath.Join(dir, "hostid")
	f.Fuzz(func(t *testing.T, nqnFile, idFile string, noID bool) {
		if err := os.WriteFile(nqnPath, []byte(nqnFile), 0o600); err != nil {
			t.Fatal(err)
		}
		err := os.WriteFile(idPath, []byte(idFile), 0o600)
		if noID {
			err = os.Remove(idPath)
		}
		if err != nil {
			t.Fatal(err)
		}
		hostNQN, hostID, err := ReadHostIdentity(nqnPath, idPath)
		if err != nil {
			return
		}
		if hostNQN != strings.TrimSpace(nqnFile) || export.ValidateNQN(hostNQN) != nil {
			t.Fatalf("host NQN file %q read as %q", nqnFile, hostNQN)
		}
		if noID && hostID != "" || !noID && (hostID != strings.TrimSpace(idFile) || !uuidRE.MatchString(hostID)) {
			t.Fatalf("host ID file %q (absent %v) read as %q", idFile, noID, hostID)
		}
		if _, err := export.FormatNodeID("worker-1", hostNQN); err != nil {
			return // New refuses to start with it
		}
		id, _ := export.For("pvc-1")
		opts := nvmeof.OptionString(nvmeof.Target{Transport: "tcp", Address: netip.MustParseAddr("192.0.2.10"), Port: 4420, NQN: id.SubsystemNQN},
			nvmeof.Host{NQN: hostNQN, ID: hostID}, export.ConnectOptions{})
		var keys []string
		for _, kv := range strings.Split(opts, ",") {
			k, _, _ := strings.Cut(kv, "=")
			keys = append(keys, k)
		}
		want := []string{"transport", "traddr", "trsvcid", "nqn", "hostnqn", "hostid"}
		if noID {
			want = want[:5]
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("host identity %q, %q: connect options %q", hostNQN, hostID, opts)
		}
	})
}
