package nvmeof_test

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/csidriver/internal/nvmeof"
)

// sysTree makes an empty sysfs and /dev tree and returns its paths. A
// fuzz target makes one and rewrites it for each input: the inputs of a
// fuzzing process run one at a time.
func sysTree(t testing.TB) nvmeof.Paths {
	t.Helper()
	root := t.TempDir()
	p := nvmeof.Paths{Sys: filepath.Join(root, "sys"), Dev: filepath.Join(root, "dev"), Fabrics: filepath.Join(root, "dev", "nvme-fabrics")}
	for _, d := range []string{filepath.Join(p.Sys, "class", "nvme"), filepath.Join(p.Sys, "block"), p.Dev} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// writeAttrs writes sysfs attribute files into dir; a nil value leaves
// the attribute out.
func writeAttrs(t *testing.T, dir string, attrs map[string]*string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range attrs {
		if v == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(*v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// items are the comma-separated key=value items of a controller's
// address attribute.
func items(address string) map[string][]string {
	m := map[string][]string{}
	for _, kv := range strings.Split(address, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = append(m[k], v)
		}
	}
	return m
}

// FuzzControllerAttributes gives Connect a controller whose sysfs
// attributes (subsysnqn, transport, state, address) hold arbitrary
// content. Connect reuses it, instead of connecting, only if it is a
// controller of the target: the subsystem NQN and transport are the
// target's, it is not being deleted or dead, and its address names the
// target's IP address and port. Reusing any other would stage the
// volume on another subsystem's namespace, or on none.
func FuzzControllerAttributes(f *testing.F) {
	id, _ := export.For("pvc-1")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "live\n", "traddr=192.0.2.10,trsvcid=4420,src_addr=192.0.2.77\n")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "connecting\n", "traddr=192.0.2.10,trsvcid=4420\n")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "deleting (no IO)\n", "traddr=192.0.2.10,trsvcid=4420\n")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "dead\n", "traddr=192.0.2.10,trsvcid=4420\n")
	f.Add(id.SubsystemNQN+"\n", "rdma\n", "live\n", "traddr=192.0.2.10,trsvcid=4420\n")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "live\n", "traddr=192.0.2.11,trsvcid=4420\n")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "live\n", "traddr=::ffff:192.0.2.10,trsvcid=4420\n")
	f.Add(id.SubsystemNQN+"\n", "tcp\n", "live\n", "traddr=192.0.2.10,trsvcid=04420\n")
	f.Add(id.SubsystemNQN+"x\n", "tcp\n", "live\n", "traddr=192.0.2.10,trsvcid=4420\n")
	f.Add(" "+id.SubsystemNQN+" ", " tcp", "live", "trsvcid=4420,traddr=192.0.2.10")
	f.Add(id.SubsystemNQN, "", "", "")
	f.Add("", "pcie\n", "live\n", "")
	p := sysTree(f)
	f.Fuzz(func(t *testing.T, subsysnqn, transport, state, address string) {
		writeAttrs(t, filepath.Join(p.Sys, "class", "nvme", "nvme0"), map[string]*string{
			"subsysnqn": &subsysnqn, "transport": &transport, "state": &state, "address": &address,
		})
		connects := 0
		in := nvmeof.NewFake(p, nvmeof.Kernel{
			Connect: func(context.Context, string) (string, error) {
				connects++
				return "instance=1,cntlid=1\n", nil
			},
			WriteAttr: func(string, string) error { return errors.New("not expected") },
		})
		target := nvmeof.Target{Transport: "tcp", Address: netip.MustParseAddr("192.0.2.10"), Port: 4420, NQN: id.SubsystemNQN}
		cs, err := in.Controllers(id.SubsystemNQN)
		if err != nil {
			t.Fatalf("Controllers: %v", err)
		}
		if len(cs) > 1 || len(cs) == 1 && (cs[0].Name != "nvme0" || cs[0].SubsysNQN != id.SubsystemNQN) {
			t.Fatalf("subsysnqn %q: controllers %+v", subsysnqn, cs)
		}
		name, reused, err := in.Connect(context.Background(), target, nvmeof.Host{}, export.ConnectOptions{})
		want := "nvme1" // the fake kernel's new controller
		if reused {
			want = "nvme0"
		}
		if err != nil || reused == (connects == 1) || name != want {
			t.Fatalf("Connect = %q, %v, %v after %d connects", name, reused, err, connects)
		}
		if !reused {
			return
		}
		st := strings.TrimSpace(state)
		addr := items(strings.TrimSpace(address))
		ipOK := false
		for _, v := range addr["traddr"] {
			a, err := netip.ParseAddr(v)
			ipOK = ipOK || err == nil && a == target.Address
		}
		if strings.TrimSpace(subsysnqn) != target.NQN || strings.TrimSpace(transport) != target.Transport ||
			strings.HasPrefix(st, "deleting") || st == "dead" || !ipOK || !slices.Contains(addr["trsvcid"], "4420") {
			t.Fatalf("reused a controller that is not the target's: subsysnqn %q, transport %q, state %q, address %q", subsysnqn, transport, state, address)
		}
	})
}

// headNode is a namespace block device with a /dev node (nvmeXnY), as
// the kernel names them.
var headNode = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// controllerName is what Connect may name a new controller: the
// kernel's /sys/class/nvme/nvmeN, N its instance number.
var controllerName = regexp.MustCompile(`^nvme(0|[1-9][0-9]*)$`)

// FuzzConnectAnswer gives Connect an arbitrary answer read back from
// /dev/nvme-fabrics. It either refuses the answer, or names the new
// controller after a non-negative instance number, the name the kernel
// gives it: the name goes into the volume's stage record.
func FuzzConnectAnswer(f *testing.F) {
	for _, a := range []string{"instance=3,cntlid=1\n", "instance=0,cntlid=65519", "instance=-1,cntlid=1\n", "instance=+2,cntlid=1",
		"instance=99999999999999999999,cntlid=1", "instance=1", "cntlid=1,instance=2", "", "instance=1,cntlid=2,junk"} {
		f.Add(a)
	}
	p := sysTree(f)
	f.Fuzz(func(t *testing.T, answer string) {
		id, _ := export.For("pvc-1")
		in := nvmeof.NewFake(p, nvmeof.Kernel{
			Connect:   func(context.Context, string) (string, error) { return answer, nil },
			WriteAttr: func(string, string) error { return errors.New("not expected") },
		})
		target := nvmeof.Target{Transport: "tcp", Address: netip.MustParseAddr("192.0.2.10"), Port: 4420, NQN: id.SubsystemNQN}
		name, reused, err := in.Connect(context.Background(), target, nvmeof.Host{}, export.ConnectOptions{})
		if err != nil {
			var e *nvmeof.Error
			if name != "" || !errors.As(err, &e) || e.Op != "connect" {
				t.Fatalf("Connect = %q, %v", name, err)
			}
			return
		}
		if reused || !controllerName.MatchString(name) {
			t.Fatalf("answer %q: controller %q, reused %v", answer, name, reused)
		}
	})
}

// FuzzFindNamespace puts a block device with an arbitrary name and
// arbitrary uuid and nguid attributes next to the volume's real one.
// FindNamespace finds a device only by a head node name (nvmeXnY) whose
// uuid or nguid is the volume's; two such devices are an error, never a
// guess.
func FuzzFindNamespace(f *testing.F) {
	id, _ := export.For("pvc-1")
	other, _ := export.For("pvc-2")
	f.Add("nvme3n1", id.UUID+"\n", "", true, false, false)
	f.Add("nvme3n1", "", strings.ToUpper(id.NGUID)+"\n", false, true, false)
	f.Add("nvme0c0n1", id.UUID+"\n", id.NGUID+"\n", true, true, true)
	f.Add("nvme3n1", other.UUID+"\n", other.NGUID+"\n", true, true, true)
	f.Add("nvme3n1", "\n", "\n", true, true, false)
	f.Add("nvme3", " "+id.UUID+" ", "", true, false, false)
	f.Add("sda", id.UUID, id.NGUID, true, true, false)
	p := sysTree(f)
	block := filepath.Join(p.Sys, "block")
	f.Fuzz(func(t *testing.T, name, uuid, nguid string, hasUUID, hasNGUID, withReal bool) {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 200 {
			return // not a directory name
		}
		if err := os.RemoveAll(block); err != nil {
			t.Fatal(err)
		}
		var u, g *string
		if hasUUID {
			u = &uuid
		}
		if hasNGUID {
			g = &nguid
		}
		writeAttrs(t, filepath.Join(p.Sys, "block", name), map[string]*string{"uuid": u, "nguid": g})
		real := "nvme1n1"
		if withReal && name != real {
			writeAttrs(t, filepath.Join(p.Sys, "block", real), map[string]*string{"uuid": &id.UUID, "nguid": &id.NGUID})
		}
		got, ok, err := nvmeof.NewFake(p, nvmeof.Kernel{}).FindNamespace(id)

		matches := headNode.MatchString(name) &&
			(hasUUID && strings.EqualFold(strings.TrimSpace(uuid), id.UUID) || hasNGUID && strings.EqualFold(strings.TrimSpace(nguid), id.NGUID))
		realToo := withReal && name != real
		switch {
		case matches && realToo:
			if err == nil {
				t.Fatalf("two devices carry the volume's identity; FindNamespace = %q, %v", got, ok)
			}
		case err != nil:
			t.Fatalf("FindNamespace: %v", err)
		case matches && (!ok || got != name), realToo && (!ok || got != real), !matches && !realToo && ok:
			t.Fatalf("device %q (uuid %q, nguid %q), real one %v: FindNamespace = %q, %v", name, uuid, nguid, realToo, got, ok)
		}
	})
}

// FuzzDeviceSize reads an arbitrary size attribute. What DeviceSize
// accepts is the number of 512-byte sectors the attribute holds, in bytes,
// never negative: NodeExpandVolume waits until it reaches the requested
// size and reports it as the volume's capacity.
func FuzzDeviceSize(f *testing.F) {
	for _, s := range []string{"2097152\n", "0\n", "-1\n", "+8\n", " 8 ", "18014398509481983\n", "18014398509481984\n", "9223372036854775807", "", "0x10"} {
		f.Add(s)
	}
	p := sysTree(f)
	f.Fuzz(func(t *testing.T, attr string) {
		writeAttrs(t, filepath.Join(p.Sys, "block", "nvme1n1"), map[string]*string{"size": &attr})
		size, err := nvmeof.NewFake(p, nvmeof.Kernel{}).DeviceSize("nvme1n1")
		if err != nil {
			return
		}
		sectors, perr := strconv.ParseInt(strings.TrimSpace(attr), 10, 64)
		if perr != nil || sectors < 0 || sectors > math.MaxInt64/512 || size != sectors*512 {
			t.Fatalf("size attribute %q read as %d bytes", attr, size)
		}
	})
}
