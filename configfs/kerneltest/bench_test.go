//go:build kernel

package kerneltest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/pillar-csi/pillar-csi/configfs"
)

// The benchmarks compare one Apply + Remove of an export (one namespace,
// one allowed host, its own port) done three ways:
//
//   - library:  configfs.FS.Apply and Remove;
//   - syscalls: the floor, a minimal program issuing exactly the mutating
//     syscalls Apply and Remove issue (mkdir, open/write/close,
//     symlink, unlink, rmdir) with every path known in advance;
//   - shell:    a plain sh script doing the same writes with mkdir, echo,
//     ln -s, rm and rmdir.
//
// Run them in one go so the ratios compare like with like:
//
//	cd tests && go run ./cmd/pillar-lab test configfs -- -test.run '^$' -test.bench . -test.benchtime 50x
//
// TestBenchmarkVariantsAgree proves the three leave identical trees.

// benchExport is the export all three variants create.
type benchExport struct {
	nqn, dev, host string
	addr           configfs.Address
	portID         uint16
}

func newBenchExport(t testing.TB) benchExport {
	addr := loopback(freePort())
	return benchExport{
		nqn:    "nqn.2024-01.io.pillar-csi.bench:vol-1",
		dev:    newLoop(t, 16),
		host:   hostNQN(),
		addr:   addr,
		portID: configfs.PreferredPortID(addr),
	}
}

func (be benchExport) export() configfs.Export {
	return configfs.Export{
		NQN:          be.nqn,
		Namespaces:   []configfs.Namespace{{NSID: 1, DevicePath: be.dev, Enabled: true}},
		Ports:        []configfs.Address{be.addr},
		AllowedHosts: []string{be.host},
	}
}

func (be benchExport) libraryApply(fs *configfs.FS, ctx context.Context) error {
	return fs.Apply(ctx, be.export())
}

func (be benchExport) libraryRemove(fs *configfs.FS, ctx context.Context) error {
	return fs.Remove(ctx, be.nqn)
}

// floorApply and floorRemove are the minimal syscall program.
func (be benchExport) floorApply() error {
	sub := nvmetDir + "/subsystems/" + be.nqn
	host := nvmetDir + "/hosts/" + be.host
	port := nvmetDir + "/ports/" + strconv.Itoa(int(be.portID))
	steps := []func() error{
		func() error { return unix.Mkdir(sub, 0o755) },
		func() error { return unix.Mkdir(sub+"/namespaces/1", 0o755) },
		func() error { return floorWrite(sub+"/namespaces/1/device_path", be.dev) },
		func() error { return floorWrite(sub+"/namespaces/1/enable", "1") },
		func() error { return unix.Mkdir(host, 0o755) },
		func() error { return unix.Symlink(host, sub+"/allowed_hosts/"+be.host) },
		func() error { return unix.Mkdir(port, 0o755) },
		func() error { return floorWrite(port+"/addr_trtype", be.addr.TrType) },
		func() error { return floorWrite(port+"/addr_adrfam", be.addr.AdrFam) },
		func() error { return floorWrite(port+"/addr_traddr", be.addr.TrAddr) },
		func() error { return floorWrite(port+"/addr_trsvcid", be.addr.TrSvcID) },
		func() error { return unix.Symlink(sub, port+"/subsystems/"+be.nqn) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

func (be benchExport) floorRemove() error {
	sub := nvmetDir + "/subsystems/" + be.nqn
	port := nvmetDir + "/ports/" + strconv.Itoa(int(be.portID))
	for _, err := range []error{
		unix.Unlink(port + "/subsystems/" + be.nqn),
		unix.Rmdir(port),
		unix.Unlink(sub + "/allowed_hosts/" + be.host),
		unix.Rmdir(nvmetDir + "/hosts/" + be.host),
		unix.Rmdir(sub + "/namespaces/1"),
		unix.Rmdir(sub),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

func floorWrite(path, value string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte(value))
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// shellScript does the same writes the way an administrator's script would.
const shellScript = `set -e
C=/sys/kernel/config/nvmet
S=$C/subsystems/$2
P=$C/ports/$5
if [ "$1" != remove ]; then
	mkdir $S
	mkdir $S/namespaces/1
	printf %s $3 > $S/namespaces/1/device_path
	printf %s 1 > $S/namespaces/1/enable
	mkdir $C/hosts/$4
	ln -s $C/hosts/$4 $S/allowed_hosts/$4
	mkdir $P
	printf %s $6 > $P/addr_trtype
	printf %s $7 > $P/addr_adrfam
	printf %s $8 > $P/addr_traddr
	printf %s $9 > $P/addr_trsvcid
	ln -s $S $P/subsystems/$2
fi
if [ "$1" != apply ]; then
	rm $P/subsystems/$2
	rmdir $P
	rm $S/allowed_hosts/$4
	rmdir $C/hosts/$4
	rmdir $S/namespaces/1
	rmdir $S
fi
`

func writeShellScript(t testing.TB) string {
	f, err := os.CreateTemp(scratchDir, "configfs-bench-*.sh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(shellScript); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}

func (be benchExport) shell(script, mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", script, mode, be.nqn, be.dev, be.host,
		strconv.Itoa(int(be.portID)), be.addr.TrType, be.addr.AdrFam, be.addr.TrAddr, be.addr.TrSvcID)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sh %s %s: %v: %s", script, mode, err, out)
	}
	return nil
}

// TestBenchmarkVariantsAgree proves that the three benchmarked variants
// build the same tree and remove it completely, so the benchmark compares
// the same work.
func TestBenchmarkVariantsAgree(t *testing.T) {
	fs, ctx := start(t)
	be := newBenchExport(t)
	script := writeShellScript(t)

	if err := be.libraryApply(fs, ctx); err != nil {
		t.Fatal(err)
	}
	want := mustRead(t, fs, ctx)
	// The namespace UUID is random per mkdir; compare everything else.
	clearUUIDs := func(st *configfs.State) *configfs.State {
		for i := range st.Subsystems {
			for j := range st.Subsystems[i].Namespaces {
				st.Subsystems[i].Namespaces[j].DeviceUUID = ""
			}
			st.Subsystems[i].Attrs.Serial = ""
		}
		return st
	}
	clearUUIDs(want)
	if err := be.libraryRemove(fs, ctx); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t)

	for _, v := range []struct {
		name          string
		apply, remove func() error
	}{
		{"syscalls", be.floorApply, be.floorRemove},
		{"shell", func() error { return be.shell(script, "apply") }, func() error { return be.shell(script, "remove") }},
	} {
		if err := v.apply(); err != nil {
			t.Fatalf("%s apply: %v", v.name, err)
		}
		got := clearUUIDs(mustRead(t, fs, ctx))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s builds a different tree than Apply (-Apply +%s):\n%s", v.name, v.name, diff)
		}
		if err := v.remove(); err != nil {
			t.Fatalf("%s remove: %v", v.name, err)
		}
		checkEmpty(t)
	}
}

func BenchmarkApplyRemove(b *testing.B) {
	requireGuest(b)
	be := newBenchExport(b)
	script := writeShellScript(b)
	fs := configfs.NewFS("")
	ctx := context.Background()
	b.Cleanup(func() { wipe(b) })

	b.Run("library", func(b *testing.B) {
		for b.Loop() {
			if err := be.libraryApply(fs, ctx); err != nil {
				b.Fatal(err)
			}
			if err := be.libraryRemove(fs, ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("syscalls", func(b *testing.B) {
		for b.Loop() {
			if err := be.floorApply(); err != nil {
				b.Fatal(err)
			}
			if err := be.floorRemove(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("shell", func(b *testing.B) {
		for b.Loop() {
			if err := be.shell(script, "both"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkApply256 applies 256 exports that share one port and one
// allowed host, each with its own namespace on one loop device: "create"
// from an empty tree, "reapply" of the same 256 when they all exist (what
// a controller restart's reconciliation costs). ns/export is per export.
func BenchmarkApply256(b *testing.B) {
	requireGuest(b)
	const n = 256
	dev := newLoop(b, 16)
	addr := loopback(freePort())
	host := hostNQN()
	fs := configfs.NewFS("")
	ctx := context.Background()
	b.Cleanup(func() { wipe(b) })
	exports := make([]configfs.Export, n)
	for i := range exports {
		exports[i] = configfs.Export{
			NQN:          fmt.Sprintf("nqn.2024-01.io.pillar-csi.bench:vol-%03d", i),
			Namespaces:   []configfs.Namespace{{NSID: 1, DevicePath: dev, Enabled: true}},
			Ports:        []configfs.Address{addr},
			AllowedHosts: []string{host},
		}
	}
	applyAll := func(b *testing.B) {
		for _, e := range exports {
			if err := fs.Apply(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
	}
	removeAll := func(b *testing.B) {
		for _, e := range exports {
			if err := fs.Remove(ctx, e.NQN); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("create", func(b *testing.B) {
		for b.Loop() {
			applyAll(b)
			b.StopTimer()
			removeAll(b)
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/export")
	})
	b.Run("reapply", func(b *testing.B) {
		applyAll(b)
		for b.Loop() {
			applyAll(b)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/export")
		b.StopTimer()
		removeAll(b)
	})
}
