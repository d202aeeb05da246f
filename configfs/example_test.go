package configfs_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/configfs"
)

// Export a logical volume over NVMe/TCP to one initiator. Apply is
// declarative: run it again with the same Export and nothing changes; run it
// with another host list and only the access list changes.
func ExampleFS_Apply() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	fs := configfs.NewFS(configfs.DefaultRoot)
	err := fs.Apply(ctx, configfs.Export{
		NQN: "nqn.2024-01.org.example:vg0-lv0",
		Attrs: configfs.SubsystemAttrs{
			Serial: "vg0-lv0",
			Model:  "example-storage",
		},
		Namespaces: []configfs.Namespace{{
			NSID:       1,
			DevicePath: "/dev/vg0/lv0",
			DeviceUUID: "6e7a1f0c-9d2b-4f7e-8a8b-3c1d2e4f5a6b",
			Enabled:    true,
		}},
		Ports: []configfs.Address{{TrType: "tcp", AdrFam: "ipv4", TrAddr: "192.0.2.10", TrSvcID: "4420"}},
		AllowedHosts: []string{
			"nqn.2014-08.org.nvmexpress:uuid:0f2c7a9e-3c33-4c59-a2e5-7d7f7b6b1a01",
		},
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Remove an export. Ports and host entries that nothing else uses go too;
// removing an export that does not exist succeeds.
func ExampleFS_Remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := configfs.NewFS("").Remove(ctx, "nqn.2024-01.org.example:vg0-lv0"); err != nil {
		log.Fatal(err)
	}
}

// Read lists what the kernel target serves, including what other tools
// (nvmetcli, shell scripts) configured. Here the tree is a stand-in made in
// a temporary directory, as another tool would have left it.
func ExampleFS_Read() {
	root, _ := os.MkdirTemp("", "nvmet-example")
	defer os.RemoveAll(root)
	ns := filepath.Join(root, "nvmet/subsystems/nqn.2016-06.io.spdk:cnode1/namespaces/1")
	for _, d := range []string{ns, filepath.Join(root, "nvmet/ports/1/subsystems"), filepath.Join(root, "nvmet/hosts")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(ns, "device_path"), []byte("/dev/nvme0n1\n"), 0o644)
	os.WriteFile(filepath.Join(ns, "enable"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(root, "nvmet/subsystems/nqn.2016-06.io.spdk:cnode1/attr_allow_any_host"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(root, "nvmet/ports/1/addr_trtype"), []byte("tcp\n"), 0o644)
	os.WriteFile(filepath.Join(root, "nvmet/ports/1/addr_adrfam"), []byte("ipv4\n"), 0o644)
	os.WriteFile(filepath.Join(root, "nvmet/ports/1/addr_traddr"), []byte("192.0.2.10\n"), 0o644)
	os.WriteFile(filepath.Join(root, "nvmet/ports/1/addr_trsvcid"), []byte("4420\n"), 0o644)
	os.Symlink("../../../../nvmet/subsystems/nqn.2016-06.io.spdk:cnode1",
		filepath.Join(root, "nvmet/ports/1/subsystems/nqn.2016-06.io.spdk:cnode1"))

	st, err := configfs.NewFS(root).Read(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range st.Subsystems {
		fmt.Println(s.NQN, "any host:", s.Attrs.AllowAnyHost)
		for _, n := range s.Namespaces {
			fmt.Println("  namespace", n.NSID, n.DevicePath, "enabled:", n.Enabled)
		}
	}
	for _, p := range st.Ports {
		fmt.Println("port", p.ID, p.Address, p.Subsystems)
	}
	// Output:
	// nqn.2016-06.io.spdk:cnode1 any host: true
	//   namespace 1 /dev/nvme0n1 enabled: true
	// port 1 tcp://192.0.2.10:4420 [nqn.2016-06.io.spdk:cnode1]
}

// Validate names before using them anywhere; the error says what is wrong.
func ExampleValidateNQN() {
	fmt.Println(configfs.ValidateNQN("nqn.2024-01.org.example:vg0-lv0"))
	err := configfs.ValidateNQN("nqn.2024-01.org.example:vg0/lv0")
	fmt.Println(errors.Is(err, configfs.ErrInvalid))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// configfs: validate "nqn.2024-01.org.example:vg0/lv0": invalid configuration: byte 27 ('/') is not printable ASCII other than space and '/'
}

// Normalize shows the canonical form an export is applied and read back in.
func ExampleExport_Normalize() {
	e, err := configfs.Export{
		NQN:        "nqn.2024-01.org.example:vol",
		Attrs:      configfs.SubsystemAttrs{Version: "2.0.0"},
		Namespaces: []configfs.Namespace{{NSID: 1, DevicePath: "/dev/zd0", DeviceNGUID: "0102030405060708090A0B0C0D0E0F10"}},
		Ports:      []configfs.Address{{TrType: "tcp", AdrFam: "ipv6", TrAddr: "FD00:0:0::10", TrSvcID: "4420"}},
	}.Normalize()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Attrs.Version, e.Namespaces[0].DeviceNGUID, e.Ports[0])
	// Output:
	// 2.0 01020304-0506-0708-090a-0b0c0d0e0f10 tcp://[fd00::10]:4420
}

// A port's ID is derived from its address, so it is the same on every node
// and after every reboot.
func ExamplePreferredPortID() {
	long := configfs.Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "fd00:0:0:0:0:0:0:10", TrSvcID: "4420"}
	short := configfs.Address{TrType: "tcp", AdrFam: "ipv6", TrAddr: "fd00::10", TrSvcID: "4420"}
	fmt.Println(configfs.PreferredPortID(long) == configfs.PreferredPortID(short))
	// Output:
	// true
}

// Kernel refusals keep their errno; helpers classify them.
func ExampleIsBusy() {
	err := error(&configfs.Error{Op: "rmdir", Path: "/sys/kernel/config/nvmet/hosts/h", Err: syscall.EBUSY})
	fmt.Println(configfs.IsBusy(err), configfs.IsNotExist(err))
	// Output:
	// true false
}
