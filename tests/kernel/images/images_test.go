//go:build kernel

package images

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/api/export"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

const (
	mib = int64(1) << 20
	// callTimeout bounds each call; the guest runs Go ~25× slower and a
	// zfs command takes about a second there.
	callTimeout = 3 * time.Minute
	// imagePath is the PATH of the images (their config's Env).
	imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// rootfs is the unpacked root filesystem of an image; the suite fails when
// it does not exist.
func rootfs(t *testing.T, image string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "bin", "images", image+".rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "usr", "bin", image)); err != nil {
		t.Fatalf("image %s: %v (run `make images` first)", image, err)
	}
	return dir
}

// mountIn mounts, inside root, what a pod spec would: target is the path
// in the container. Unmounted (recursively, in reverse) at the end of the
// test.
func mountIn(t *testing.T, root, target string, args ...string) {
	t.Helper()
	dst := filepath.Join(root, target)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", append(args, dst)...)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-R", "-l", dst).CombinedOutput(); err != nil {
			t.Logf("umount -R %s: %v: %s", dst, err, out)
		}
	})
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v: %s", name, args, err, out)
	}
	return string(out)
}

// chrooted is a command of the image at root, run chrooted into it with
// the image's environment, as its container runs it.
func chrooted(root string, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{imagePath, "LC_ALL=C"}
	return cmd
}

// TestBinariesRun: each image's binary runs from the image alone.
func TestBinariesRun(t *testing.T) {
	guest.RequireGuest(t)
	for _, image := range []string{"pillar-controller", "pillar-agent", "pillar-node"} {
		root := rootfs(t, image)
		out, err := chrooted(root, "/usr/bin/"+image, "-version").CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) == 0 {
			t.Errorf("%s -version in its image: %v: %q", image, err, out)
			continue
		}
		t.Logf("%s: %s", image, bytes.TrimSpace(out))
	}
}

// TestInitContainersLoadModules: the init containers' modprobe, with the
// host's /lib/modules mounted read-only, succeeds for modules that are
// already loaded (the lab loaded them at boot).
func TestInitContainersLoadModules(t *testing.T) {
	guest.RequireGuest(t)
	for image, mods := range map[string][]string{
		"pillar-agent": {"nvmet", "nvmet_tcp"},
		"pillar-node":  {"nvme_tcp", "nvme_fabrics"},
	} {
		root := rootfs(t, image)
		mountIn(t, root, "/lib/modules", "--rbind", "-o", "ro", "/lib/modules")
		mountIn(t, root, "/proc", "-t", "proc", "proc")
		mountIn(t, root, "/sys", "--rbind", "/sys")
		out, err := chrooted(root, append([]string{"/sbin/modprobe", "-a"}, mods...)...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: modprobe -a %s: %v: %s", image, strings.Join(mods, " "), err, out)
		}
	}
}

// TestModprobeNeedsOnlySysModule: the init containers run without
// privileged, with CAP_SYS_MODULE alone. The image's modprobe, as a user
// that has that one capability (and is not even root), loads nvme_tcp into
// the kernel; without it the kernel refuses. The module must not be in use:
// this test runs before the others of the package connect anything.
func TestModprobeNeedsOnlySysModule(t *testing.T) {
	guest.RequireGuest(t)
	root := rootfs(t, "pillar-node")
	mountIn(t, root, "/lib/modules", "--rbind", "-o", "ro", "/lib/modules")
	mountIn(t, root, "/proc", "-t", "proc", "proc")
	mountIn(t, root, "/sys", "--rbind", "/sys")
	loaded := func() bool {
		_, err := os.Stat("/sys/module/nvme_tcp")
		return err == nil
	}
	unload := func() {
		t.Helper()
		if out, err := exec.Command("modprobe", "-r", "nvme_tcp").CombinedOutput(); err != nil || loaded() {
			t.Fatalf("modprobe -r nvme_tcp (is a controller still connected?): %v: %s", err, out)
		}
	}
	t.Cleanup(func() { exec.Command("modprobe", "nvme_tcp").Run() })
	modprobe := func(caps ...uintptr) ([]byte, error) {
		cmd := chrooted(root, "/sbin/modprobe", "-a", "nvme_tcp", "nvme_fabrics")
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		cmd.SysProcAttr.AmbientCaps = caps
		return cmd.CombinedOutput()
	}

	unload()
	if out, err := modprobe(); err == nil || loaded() {
		t.Fatalf("modprobe without CAP_SYS_MODULE loaded nvme_tcp (%v: %s): the control proves nothing", err, out)
	}
	const capSysModule = 16 // include/uapi/linux/capability.h
	if out, err := modprobe(capSysModule); err != nil || !loaded() {
		t.Fatalf("modprobe with CAP_SYS_MODULE alone: %v: %s (loaded: %v)", err, out, loaded())
	}
}

// proc is a process the test started and stops at its end.
type proc struct {
	cmd *exec.Cmd
	log *bytes.Buffer
}

func start(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, log: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("---- %s log ----\n%s", filepath.Base(cmd.Path), p.log)
		}
	})
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitHTTP waits for url to answer 200.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", url, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// agentBox is pillar-agent running from its image, and a client of it
// that sends the installation's token, as pillar-controller does.
type agentBox struct {
	agentv1.AgentServiceClient
	addr string
	gen  string // the generations directory, as the host sees it
}

// agentContainer runs pillar-agent from its image as the DaemonSet does:
// the host's / at /host, /dev, /sys (configfs under it), /proc, the
// generations directory, the agent-token Secret, /lib/modules read-only;
// the chart's flags.
func agentContainer(t *testing.T) *agentBox {
	t.Helper()
	root := rootfs(t, "pillar-agent")
	mountIn(t, root, "/host", "--rbind", "/")
	run(t, "mount", "--make-rslave", filepath.Join(root, "host"))
	mountIn(t, root, "/dev", "--rbind", "/dev")
	mountIn(t, root, "/sys", "--rbind", "/sys")
	mountIn(t, root, "/proc", "-t", "proc", "proc")
	mountIn(t, root, "/lib/modules", "--rbind", "-o", "ro", "/lib/modules")
	gen := t.TempDir()
	mountIn(t, root, "/var/lib/pillar-csi/agent/generations", "--bind", gen)
	tokens := t.TempDir()
	tokenFile := filepath.Join(tokens, agentauth.ClientKey)
	if err := os.WriteFile(tokenFile, []byte(rand.Text()+rand.Text()), 0o400); err != nil {
		t.Fatal(err)
	}
	mountIn(t, root, "/etc/pillar-csi/agent-token", "--bind", "-o", "ro", tokens)
	grpcPort, httpPort := fixture.FreeTCPPort(t), fixture.FreeTCPPort(t)
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	start(t, chrooted(root, "/usr/bin/pillar-agent", "-node-name", "lab",
		"-listen-address", addr, "-metrics-address", "127.0.0.1:"+strconv.Itoa(httpPort),
		"-token-dir", "/etc/pillar-csi/agent-token",
		"-host-root", "/host", "-lvm-reject", "^/dev/zd", "-lvm-reject", "^/dev/nvme", "-log-level", "debug"))
	waitHTTP(t, "http://127.0.0.1:"+strconv.Itoa(httpPort)+"/readyz")
	token, err := agentauth.NewClientToken(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return &agentBox{AgentServiceClient: dialAgent(t, addr, grpc.WithPerRPCCredentials(token)), addr: addr, gen: gen}
}

// dialAgent is a plaintext client of the agent at addr.
func dialAgent(t *testing.T, addr string, opts ...grpc.DialOption) agentv1.AgentServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentServiceClient(conn)
}

// exportedZvol creates a 64 MiB zvol id in pool through the agent and
// exports it on 127.0.0.1, and removes both at the end of the test. It
// returns the store, the owner's fencing token and the export's port.
func exportedZvol(t *testing.T, c *agentBox, pool, id string) (*agentv1.Store, *agentv1.FencingToken, int) {
	t.Helper()
	st := &agentv1.Store{Name: "zfs", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: pool, ParentDataset: "pillar", Sparse: true}}}
	tk := tok(t)
	if _, err := c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: st, CapacityBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	port := fixture.FreeTCPPort(t)
	if _, err := c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: st,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "127.0.0.1", Port: uint32(port)}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.UnexportVolume(context.Background(), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id})
		c.DeleteVolume(context.Background(), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: st})
	})
	return st, tk, port
}

// TestAgentImageRefusesStrangers: a client that is not the controller
// knows a volume's ID and even its owner's fencing token, and asks the
// agent to unexport and destroy it, without a token and with a made-up
// one. Every call is refused UNAUTHENTICATED, and the zvol and its export
// are still there.
func TestAgentImageRefusesStrangers(t *testing.T) {
	guest.RequireGuest(t)
	c := agentContainer(t)
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 256 * mib})
	id := "pvc-image-stranger"
	st, tk, _ := exportedZvol(t, c, pool.Name, id)
	made := strings.Repeat("m", 48)
	for name, s := range map[string]agentv1.AgentServiceClient{
		"no token":        dialAgent(t, c.addr),
		"made-up token":   dialAgent(t, c.addr, grpc.WithPerRPCCredentials(agentauth.Bearer(made))),
		"too short token": dialAgent(t, c.addr, grpc.WithPerRPCCredentials(agentauth.Bearer("x"))),
	} {
		calls := map[string]func() error{
			"ListExports": func() error { _, err := s.ListExports(ctxT(t), &agentv1.ListExportsRequest{}); return err },
			"UnexportVolume": func() error {
				_, err := s.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id})
				return err
			},
			"DeleteVolume": func() error {
				_, err := s.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: st})
				return err
			},
		}
		for call, f := range calls {
			if err := f(); status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: %s = %v, want UNAUTHENTICATED", name, call, err)
			}
		}
	}
	wantExportAndZvol(t, pool.Name, id, "after the strangers' calls")
}

// wantExportAndZvol fails the test unless volume id's export is in the
// kernel's configfs and its zvol in pool.
func wantExportAndZvol(t *testing.T, pool, id, when string) {
	t.Helper()
	ident, _ := export.For(id)
	if _, err := os.Stat(filepath.Join("/sys/kernel/config/nvmet/subsystems", ident.SubsystemNQN)); err != nil {
		t.Errorf("the export is gone %s: %v", when, err)
	}
	if out := run(t, "zfs", "list", "-H", "-o", "name", "-r", pool); !strings.Contains(out, id) {
		t.Errorf("the zvol is gone %s: zfs list: %s", when, out)
	}
}

// TestAgentImageFailsClosedOnLostMarks: the generations directory is
// wiped under the running agent image (a lost or replaced disk). A
// DeleteVolume or UnexportVolume of a zvol that exists, with its owner's
// token or with a made-up one, is refused with UNMARKED, and the zvol and
// its export stay; a new volume is still created.
func TestAgentImageFailsClosedOnLostMarks(t *testing.T) {
	guest.RequireGuest(t)
	c := agentContainer(t)
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 256 * mib})
	id := "pvc-image-lost-marks"
	st, tk, _ := exportedZvol(t, c, pool.Name, id)

	saved := t.TempDir()
	run(t, "cp", "-a", c.gen+"/.", saved)
	entries, err := os.ReadDir(c.gen)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(c.gen, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	// Put the marks back at the end, so the volume's cleanup is admitted.
	t.Cleanup(func() { exec.Command("cp", "-a", saved+"/.", c.gen).Run() })

	madeUp := tok(t)
	for _, k := range []*agentv1.FencingToken{tk, madeUp} {
		_, derr := c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: k, VolumeId: id, Store: st})
		_, uerr := c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: k, VolumeId: id})
		for call, err := range map[string]error{"DeleteVolume": derr, "UnexportVolume": uerr} {
			rej, ok := agentv1.FencingRejectionOf(err)
			if status.Code(err) != codes.FailedPrecondition || !ok || rej.GetReason() != agentv1.FencingRejection_REASON_UNMARKED {
				t.Errorf("%s with token %s: %v, want FAILED_PRECONDITION with REASON_UNMARKED", call, k.GetLifecycleUid(), err)
			}
		}
	}
	wantExportAndZvol(t, pool.Name, id, "after the refused calls")
	// "v."+id is fencing.FileName of this ID.
	if _, err := os.Stat(filepath.Join(c.gen, "v."+id)); err == nil {
		t.Error("a refused call wrote the volume's mark")
	}
	newID, newTok := "pvc-image-after-loss", tok(t)
	if _, err := c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: newTok, VolumeId: newID, Store: st, CapacityBytes: 16 * mib}); err != nil {
		t.Errorf("a new volume after the loss: %v", err)
	}
	if _, err := c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: newTok, VolumeId: newID, Store: st}); err != nil {
		t.Errorf("deleting the new volume: %v", err)
	}
}

func tok(t *testing.T) *agentv1.FencingToken {
	return &agentv1.FencingToken{LifecycleUid: fixture.RandomUUID(t), PublicationGeneration: 1}
}

// TestAgentImageDrivesTheHostsTools: create, export, expand, unexport and
// delete through pillar-agent's image on ZFS and on LVM thin.
func TestAgentImageDrivesTheHostsTools(t *testing.T) {
	guest.RequireGuest(t)
	c := agentContainer(t)
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 512 * mib})
	vg := fixture.NewVG(t, fixture.VGOptions{Size: 1 << 30, ThinPoolSize: 512 * mib})
	for _, st := range []*agentv1.Store{
		{Name: "zfs", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: pool.Name, ParentDataset: "pillar", Sparse: true}}},
		{Name: "lvm", Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: vg.Name, ThinPool: vg.ThinPool}}},
	} {
		t.Run(st.GetName(), func(t *testing.T) {
			id, tk := "pvc-image-"+st.GetName(), tok(t)
			if _, err := c.CreateVolume(ctxT(t), &agentv1.CreateVolumeRequest{FencingToken: tk, VolumeId: id, Store: st, CapacityBytes: 64 * mib}); err != nil {
				t.Fatal(err)
			}
			port := fixture.FreeTCPPort(t)
			r, err := c.ExportVolume(ctxT(t), &agentv1.ExportVolumeRequest{FencingToken: tk, VolumeId: id, Store: st,
				Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{BindAddress: "127.0.0.1", Port: uint32(port)}}})
			if err != nil {
				t.Fatal(err)
			}
			ident, _ := export.For(id)
			if r.GetExport().GetSubsystemNqn() != ident.SubsystemNQN {
				t.Fatalf("export %v, want subsystem %s", r.GetExport(), ident.SubsystemNQN)
			}
			if _, err := os.Stat(filepath.Join("/sys/kernel/config/nvmet/subsystems", ident.SubsystemNQN)); err != nil {
				t.Fatalf("the export is not in the kernel's configfs: %v", err)
			}
			if _, err := c.ExpandVolume(ctxT(t), &agentv1.ExpandVolumeRequest{FencingToken: tk, VolumeId: id, Store: st, CapacityBytes: 96 * mib}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.UnexportVolume(ctxT(t), &agentv1.UnexportVolumeRequest{FencingToken: tk, VolumeId: id}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.DeleteVolume(ctxT(t), &agentv1.DeleteVolumeRequest{FencingToken: tk, VolumeId: id, Store: st}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if out := run(t, "zfs", "list", "-H", "-o", "name", "-r", pool.Name); strings.Contains(out, "pvc-image") {
		t.Errorf("zvols left: %s", out)
	}
}

// TestNodeImageStagesAVolume: pillar-node from its image stages a volume
// the agent image exports (connect, mkfs.ext4, mount) and unstages it.
func TestNodeImageStagesAVolume(t *testing.T) {
	guest.RequireGuest(t)
	c := agentContainer(t)
	pool := fixture.NewZPool(t, fixture.PoolOptions{Size: 512 * mib})
	id := "pvc-image-node"
	_, tk, port := exportedZvol(t, c, pool.Name, id)

	// The DaemonSet's mounts: the kubelet directory (at the same path
	// inside and out, shared), /dev, /sys, /proc, /etc/nvme, the state
	// directory, /lib/modules read-only.
	root := rootfs(t, "pillar-node")
	kubelet := filepath.Join("/run", "kubelet-"+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	// A shared mount of its own, as kubelet's directory is on a node
	// (systemd makes / rshared): what the node mounts inside shows here.
	run(t, "mount", "--bind", kubelet, kubelet)
	run(t, "mount", "--make-shared", kubelet)
	t.Cleanup(func() { exec.Command("umount", "-R", "-l", kubelet).Run() })
	mountIn(t, root, kubelet, "--rbind", kubelet)
	mountIn(t, root, "/dev", "--rbind", "/dev")
	mountIn(t, root, "/sys", "--rbind", "/sys")
	mountIn(t, root, "/proc", "-t", "proc", "proc")
	mountIn(t, root, "/lib/modules", "--rbind", "-o", "ro", "/lib/modules")
	nvme := t.TempDir()
	hostID := fixture.RandomUUID(t)
	hostNQN := "nqn.2014-08.org.nvmexpress:uuid:" + hostID
	for f, v := range map[string]string{"hostnqn": hostNQN, "hostid": hostID} {
		if err := os.WriteFile(filepath.Join(nvme, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mountIn(t, root, "/etc/nvme", "--bind", nvme)
	mountIn(t, root, "/var/lib/pillar-csi/node", "--bind", t.TempDir())
	sock := filepath.Join(kubelet, "plugins", "pillar-csi.io", "csi.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	// Registration as the chart sets it up; nobody plays kubelet here, so
	// the socket is served and never confirmed.
	registry := filepath.Join(kubelet, "plugins_registry")
	mountIn(t, root, "/registration", "--bind", mkdir(t, registry))
	healthPort := fixture.FreeTCPPort(t)
	start(t, chrooted(root, "/usr/bin/pillar-node", "-csi-endpoint", "unix://"+sock, "-node-name", "lab", "-log-level", "debug",
		"-kubelet-registration-path", sock, "-plugin-registration-dir", "/registration", "-kubelet-dir", kubelet,
		"-health-address", "127.0.0.1:"+strconv.Itoa(healthPort)))
	conn, err := grpc.NewClient("passthrough:///pillar-node", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", filepath.Join(root, sock))
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitProbe(t, csi.NewIdentityClient(conn))
	waitHTTP(t, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/healthz")
	if _, err := os.Stat(filepath.Join(registry, "pillar-csi.io-reg.sock")); err != nil {
		t.Errorf("no registration socket for kubelet: %v", err)
	}
	node := csi.NewNodeClient(conn)
	if _, err := c.AllowHost(ctxT(t), &agentv1.AllowHostRequest{FencingToken: tk, VolumeId: id, HostNqn: hostNQN}); err != nil {
		t.Fatal(err)
	}
	ident, _ := export.For(id)
	vctx := map[string]string{export.ContextTransport: "tcp", export.ContextTargetAddress: "127.0.0.1",
		export.ContextTargetPort: strconv.Itoa(port), export.ContextSubsystemNQN: ident.SubsystemNQN,
		export.ContextCtrlLossTimeoutSeconds: "10", export.ContextReconnectDelaySeconds: "1"}
	staging := filepath.Join(kubelet, "plugins", "kubernetes.io", "csi", "pillar-csi.io", id, "globalmount")
	capability := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	if err := os.MkdirAll(filepath.Join(root, staging), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeStageVolume(ctxT(t), &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: vctx}); err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
	// The mount the node made in its container is the host's: the
	// kubelet directory is shared.
	mounts := run(t, "findmnt", "-n", "-o", "FSTYPE", "--target", staging)
	if strings.TrimSpace(mounts) != "ext4" {
		t.Errorf("on the host, %s is %q, want an ext4 mount", staging, mounts)
	}
	if _, err := node.NodeUnstageVolume(ctxT(t), &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatalf("NodeUnstageVolume: %v", err)
	}
	if out, _ := exec.Command("findmnt", "-n", "--mountpoint", staging).CombinedOutput(); len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("after unstage %s is still mounted: %s", staging, out)
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func waitProbe(t *testing.T, c csi.IdentityClient) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := c.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && r.GetReady().GetValue() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pillar-node never ready: %v, %v", r, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
