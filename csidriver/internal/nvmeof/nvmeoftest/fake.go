// Package nvmeoftest is a stand-in for the kernel's NVMe-oF initiator in
// unit tests: a sysfs and /dev tree in a temporary directory, and
// connect/delete/rescan operations that change it the way the kernel
// changes the real one. It proves nothing about the kernel; the kernel
// lab suite (tests/kernel/node) does.
package nvmeoftest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
)

// Fake is a fake initiator tree with exported targets.
type Fake struct {
	Root string

	mu       sync.Mutex
	targets  map[string]*target // by "traddr:port/nqn"
	nextCtrl int
	// Namespaces are named from a separate counter starting high, so a
	// test that guessed names by order would fail.
	nextNS   int
	connects []string
	// FailConnect, when set, is returned by the next connects.
	FailConnect error
}

type target struct {
	nqn   string
	id    export.Identity
	size  int64
	ctrls map[string]string // controller name -> block device name
	// content is what a new device node of this namespace holds: the
	// signature the fake blkid reports, "" for a blank device.
	content string
}

// New returns an empty fake tree under t.TempDir().
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{Root: t.TempDir(), targets: map[string]*target{}, nextNS: 7}
	for _, d := range []string{"sys/class/nvme", "sys/block", "sys/module/nvme_tcp", "dev"} {
		if err := os.MkdirAll(filepath.Join(f.Root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(f.Paths().Fabrics, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A decoy namespace of another volume, listed first.
	other, _ := export.For("pvc-decoy")
	f.makeBlock(t, "nvme0n1", other, 1<<30)
	return f
}

// Paths are the fake tree's kernel interfaces.
func (f *Fake) Paths() nvmeof.Paths {
	return nvmeof.Paths{Sys: filepath.Join(f.Root, "sys"), Dev: filepath.Join(f.Root, "dev"), Fabrics: filepath.Join(f.Root, "dev", "nvme-fabrics")}
}

// Initiator returns an Initiator working on the fake tree.
func (f *Fake) Initiator() *nvmeof.Initiator {
	return nvmeof.NewFake(f.Paths(), nvmeof.Kernel{Connect: f.connect, WriteAttr: f.writeAttr})
}

// Export makes volumeID reachable at addr:port with a namespace of size
// bytes.
func (f *Fake) Export(volumeID, addr string, port uint16, size int64) {
	id, err := export.For(volumeID)
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[fmt.Sprintf("%s:%d/%s", addr, port, id.SubsystemNQN)] = &target{nqn: id.SubsystemNQN, id: id, size: size, ctrls: map[string]string{}}
}

// Connects returns the option strings written so far.
func (f *Fake) Connects() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.connects...)
}

func (f *Fake) connect(_ context.Context, options string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.connects = append(f.connects, options)
	if f.FailConnect != nil {
		return "", f.FailConnect
	}
	kv := map[string]string{}
	for _, o := range strings.Split(options, ",") {
		k, v, _ := strings.Cut(o, "=")
		kv[k] = v
	}
	tg, ok := f.targets[kv["traddr"]+":"+kv["trsvcid"]+"/"+kv["nqn"]]
	if !ok {
		return "", syscall.ECONNREFUSED
	}
	inst := f.nextCtrl
	f.nextCtrl++
	ctrl := "nvme" + strconv.Itoa(inst)
	dir := filepath.Join(f.Root, "sys/class/nvme", ctrl)
	must(os.MkdirAll(dir, 0o755))
	for name, v := range map[string]string{
		"subsysnqn": kv["nqn"], "transport": kv["transport"], "state": "live", "hostnqn": kv["hostnqn"],
		"address":           "traddr=" + kv["traddr"] + ",trsvcid=" + kv["trsvcid"] + ",src_addr=127.0.0.1",
		"delete_controller": "", "rescan_controller": "",
	} {
		must(os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644))
	}
	ns := fmt.Sprintf("nvme%dn1", f.nextNS)
	f.nextNS++
	f.makeBlock(nil, ns, tg.id, tg.size)
	must(os.WriteFile(filepath.Join(f.Root, "dev", ns), []byte(tg.content), 0o600))
	tg.ctrls[ctrl] = ns
	return fmt.Sprintf("instance=%d,cntlid=%d\n", inst, inst+1), nil
}

func (f *Fake) makeBlock(t testing.TB, name string, id export.Identity, size int64) {
	dir := filepath.Join(f.Root, "sys/block", name)
	err := os.MkdirAll(dir, 0o755)
	for file, v := range map[string]string{"uuid": id.UUID, "nguid": id.NGUID, "size": strconv.FormatInt(size/512, 10)} {
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o644)
		}
	}
	if err == nil {
		// The device node; its content is what the fake blkid reads.
		err = os.WriteFile(filepath.Join(f.Root, "dev", name), nil, 0o600)
	}
	if err != nil {
		if t != nil {
			t.Fatal(err)
		}
		panic(err)
	}
}

func (f *Fake) writeAttr(path, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Stat(path); err != nil {
		return err
	}
	ctrl := filepath.Base(filepath.Dir(path))
	for _, tg := range f.targets {
		ns, ok := tg.ctrls[ctrl]
		if !ok {
			continue
		}
		switch filepath.Base(path) {
		case "delete_controller":
			// The namespace keeps what was written to it.
			if b, err := os.ReadFile(filepath.Join(f.Root, "dev", ns)); err == nil {
				tg.content = string(b)
			}
			delete(tg.ctrls, ctrl)
			must(os.RemoveAll(filepath.Join(f.Root, "sys/class/nvme", ctrl)))
			must(os.RemoveAll(filepath.Join(f.Root, "sys/block", ns)))
			must(os.Remove(filepath.Join(f.Root, "dev", ns)))
		case "rescan_controller":
			must(os.WriteFile(filepath.Join(f.Root, "sys/block", ns, "size"), []byte(strconv.FormatInt(tg.size/512, 10)+"\n"), 0o644))
		}
		return nil
	}
	return fmt.Errorf("fake: %s is not a controller attribute", path)
}

// SetContent sets what the namespace of volumeID holds from its next
// connect on: the filesystem type the fake blkid reports ("ext4", "xfs"),
// "PTTYPE=gpt" for a partition table, or "" for a blank device.
func (f *Fake) SetContent(volumeID, content string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tg := range f.targets {
		if tg.id.VolumeID == volumeID {
			tg.content = content
		}
	}
}

// Grow changes the exported size; the initiator sees it after a rescan.
func (f *Fake) Grow(volumeID string, size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tg := range f.targets {
		if tg.id.VolumeID == volumeID {
			tg.size = size
		}
	}
}

// SetState sets the state of every controller of volumeID, e.g.
// "connecting" after the target went away.
func (f *Fake) SetState(volumeID, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tg := range f.targets {
		if tg.id.VolumeID != volumeID {
			continue
		}
		for ctrl := range tg.ctrls {
			must(os.WriteFile(filepath.Join(f.Root, "sys/class/nvme", ctrl, "state"), []byte(state+"\n"), 0o644))
		}
	}
}

// Controllers returns the controller names connected to volumeID.
func (f *Fake) Controllers(volumeID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, tg := range f.targets {
		if tg.id.VolumeID == volumeID {
			for c := range tg.ctrls {
				out = append(out, c)
			}
		}
	}
	return out
}

// Device returns the /dev path of volumeID's namespace, "" if none.
func (f *Fake) Device(volumeID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, tg := range f.targets {
		if tg.id.VolumeID == volumeID {
			for _, ns := range tg.ctrls {
				return filepath.Join(f.Root, "dev", ns)
			}
		}
	}
	return ""
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
