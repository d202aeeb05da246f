// Command datapath runs the pillar-csi data path end to end on one real kernel,
// through the driver's own binaries: pillar-agent exports a ZFS zvol (or an
// LVM LV) over NVMe/TCP, pillar-node connects, formats, stages and publishes
// it, and the data written through the node is read back after a full
// unstage, re-export and restage. The program plays the controller's part:
// it issues the fencing tokens, and shows a stale token being refused.
//
// Storage node and worker share the lab guest's kernel over 127.0.0.1, as
// the kernel's own NVMe-oF tests do. Run it with `make demo-datapath`
// (root, the kernel lab); outside the lab it refuses to start. `make demo`
// is the same data path in a Kubernetes cluster (tests/demo).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/api/agentauth"
	"github.com/pillar-csi/pillar-csi/api/export"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	volumeID    = "demo-vol"
	volumeBytes = 512 << 20
	agentAddr   = "127.0.0.1:9420"
	metricsAddr = "127.0.0.1:9421"
	targetPort  = 4420
	callTimeout = 2 * time.Minute
)

// proc is a started binary and the pipe that carries its log to our
// stdout.
type proc struct {
	cmd *exec.Cmd
	log *io.PipeWriter
}

type demo struct {
	bin     string // directory of pillar-agent and pillar-node
	backend string // zfs or lvm
	work    string // scratch directory, outside the guest's tmpfs /tmp

	loop   string
	procs  []proc
	agent  agentv1.AgentServiceClient
	node   csi.NodeClient
	store  *agentv1.Store
	uid    string // the volume's lifecycle UID, as a PillarVolumeState UID would be
	gen    uint64 // the last publicationGeneration issued
	nodeID export.NodeID
}

func main() {
	d := &demo{}
	exe, _ := os.Executable()
	flag.StringVar(&d.bin, "bin", filepath.Dir(exe), "directory holding pillar-agent and pillar-node")
	flag.StringVar(&d.backend, "backend", "zfs", "storage backend: zfs or lvm")
	flag.StringVar(&d.work, "work", "/var/tmp/pillar-demo", "scratch directory (removed first)")
	flag.Parse()
	if d.backend != "zfs" && d.backend != "lvm" {
		fmt.Fprintf(os.Stderr, "demo: -backend %q: want zfs or lvm\n", d.backend)
		os.Exit(2)
	}
	err := d.run()
	d.cleanup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo passed")
}

func step(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

func (d *demo) run() error {
	if b, _ := os.ReadFile("/proc/cmdline"); !strings.Contains(string(b), "pillar.lab=1") {
		return errors.New("not in the kernel lab (no pillar.lab=1 on the kernel command line); run `make demo-datapath`")
	}
	if err := os.RemoveAll(d.work); err != nil {
		return err
	}
	if err := os.MkdirAll(d.work, 0o755); err != nil {
		return err
	}

	if err := d.storage(); err != nil {
		return err
	}
	if err := d.startAgent(); err != nil {
		return err
	}
	if err := d.startNode(); err != nil {
		return err
	}

	step("controller → agent: CreateVolume %s (%d MiB) with lifecycle %s, generation 1", volumeID, volumeBytes>>20, d.uid)
	ctx, cancel := context.WithTimeout(context.Background(), 10*callTimeout)
	defer cancel()
	cv, err := d.agent.CreateVolume(ctx, &agentv1.CreateVolumeRequest{
		FencingToken: d.next(), VolumeId: volumeID, Store: d.store, CapacityBytes: volumeBytes})
	if err != nil {
		return fmt.Errorf("CreateVolume: %w", err)
	}
	fmt.Printf("created %s: %d bytes\n", cv.GetVolume().GetVolumeId(), cv.GetVolume().GetCapacityBytes())

	vctx, err := d.export(ctx)
	if err != nil {
		return err
	}
	sum, err := d.stageWriteRead(ctx, vctx, nil)
	if err != nil {
		return err
	}

	step("controller → agent: UnexportVolume, generation %d", d.gen+1)
	if _, err := d.agent.UnexportVolume(ctx, &agentv1.UnexportVolumeRequest{FencingToken: d.next(), VolumeId: volumeID}); err != nil {
		return fmt.Errorf("UnexportVolume: %w", err)
	}

	step("a stale controller replays ExportVolume with generation 1: refused, nothing changes")
	_, err = d.agent.ExportVolume(ctx, d.exportRequest(&agentv1.FencingToken{LifecycleUid: d.uid, PublicationGeneration: 1}))
	rej, ok := agentv1.FencingRejectionOf(err)
	if !ok {
		return fmt.Errorf("stale ExportVolume: got %v, want a fencing rejection", err)
	}
	fmt.Printf("refused: %s (presented generation %d; the agent's log names the mark)\n", rej.GetReason(),
		rej.GetPresented().GetPublicationGeneration())
	le, err := d.agent.ListExports(ctx, &agentv1.ListExportsRequest{})
	if err != nil {
		return fmt.Errorf("ListExports: %w", err)
	}
	if n := len(le.GetExports()); n != 0 {
		return fmt.Errorf("a refused ExportVolume left %d export(s) behind", n)
	}
	fmt.Println("ListExports: no exports")

	if vctx, err = d.export(ctx); err != nil {
		return err
	}
	if _, err := d.stageWriteRead(ctx, vctx, sum); err != nil {
		return err
	}

	step("controller → agent: DeleteVolume, generation %d (ends the lifecycle)", d.gen+1)
	if _, err := d.agent.UnexportVolume(ctx, &agentv1.UnexportVolumeRequest{FencingToken: d.next(), VolumeId: volumeID}); err != nil {
		return fmt.Errorf("UnexportVolume: %w", err)
	}
	if _, err := d.agent.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{FencingToken: d.next(), VolumeId: volumeID, Store: d.store}); err != nil {
		return fmt.Errorf("DeleteVolume: %w", err)
	}
	_, err = d.agent.CreateVolume(ctx, &agentv1.CreateVolumeRequest{
		FencingToken: d.next(), VolumeId: volumeID, Store: d.store, CapacityBytes: volumeBytes})
	if rej, ok := agentv1.FencingRejectionOf(err); !ok {
		return fmt.Errorf("CreateVolume after the lifecycle ended: got %v, want a fencing rejection", err)
	} else {
		fmt.Printf("a late CreateVolume of the ended lifecycle is refused: %s\n", rej.GetReason())
	}

	step("pillar-agent metrics (%s/metrics)", metricsAddr)
	return d.showMetrics(ctx)
}

// storage makes the pool or volume group the agent's store lives in, on a
// loop device (ZFS cannot use a file on the guest's tmpfs).
func (d *demo) storage() error {
	step("storage node: a %s store on a 1 GiB loop device", d.backend)
	img := filepath.Join(d.work, "store.img")
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	err = f.Truncate(1 << 30)
	f.Close()
	if err != nil {
		return err
	}
	out, err := command("losetup", "-f", "--show", img)
	if err != nil {
		return err
	}
	d.loop = strings.TrimSpace(out)
	switch d.backend {
	case "zfs":
		if _, err := command("zpool", "create", "-f", "demo", d.loop); err != nil {
			return err
		}
		d.store = &agentv1.Store{Name: "demo-zfs", Backend: &agentv1.Store_Zfs{Zfs: &agentv1.ZfsStore{Pool: "demo", Sparse: true}}}
		out, _ = command("zpool", "list", "demo")
	case "lvm":
		if _, err := command("vgcreate", "--config", lvmConfig, "demo", d.loop); err != nil {
			return err
		}
		d.store = &agentv1.Store{Name: "demo-lvm", Backend: &agentv1.Store_Lvm{Lvm: &agentv1.LvmStore{VolumeGroup: "demo"}}}
		out, _ = command("vgs", "--config", lvmConfig, "demo")
	}
	fmt.Print(out)
	return nil
}

// lvmConfig lets LVM work without udev, which the lab guest does not run.
const lvmConfig = "activation { udev_sync=0 udev_rules=0 } devices { obtain_device_list_from_udev=0 }"

func (d *demo) startAgent() error {
	step("storage node: start pillar-agent on %s (plaintext gRPC with the installation's token, metrics on %s)", agentAddr, metricsAddr)
	// The token, as the chart generates it into a Secret: every call but
	// health carries it, and the agent refuses the others.
	tokens := filepath.Join(d.work, "agent-token")
	if err := os.Mkdir(tokens, 0o700); err != nil {
		return err
	}
	tokenFile := filepath.Join(tokens, agentauth.ClientKey)
	if err := os.WriteFile(tokenFile, []byte(rand.Text()+rand.Text()), 0o400); err != nil {
		return err
	}
	if err := d.start("pillar-agent", "-listen-address", agentAddr, "-metrics-address", metricsAddr, "-token-dir", tokens,
		"-node-name", "storage-0", "-generations-dir", filepath.Join(d.work, "generations"), "-log-format", "text"); err != nil {
		return err
	}
	token, err := agentauth.NewClientToken(tokenFile)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(agentAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(token))
	if err != nil {
		return err
	}
	if err := waitServing(healthpb.NewHealthClient(conn)); err != nil {
		return fmt.Errorf("pillar-agent: %w", err)
	}
	d.agent = agentv1.NewAgentServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	info, err := d.agent.GetAgentInfo(ctx, &agentv1.GetAgentInfoRequest{})
	if err != nil {
		return fmt.Errorf("GetAgentInfo: %w", err)
	}
	fmt.Printf("agent on %s, version %s, capabilities %v\n", info.GetNodeName(), info.GetAgentVersion(), info.GetCapabilities())
	d.uid = randomUUID()
	return nil
}

func (d *demo) startNode() error {
	sock := filepath.Join(d.work, "csi.sock")
	step("worker: start pillar-node on unix://%s", sock)
	hostNQN := filepath.Join(d.work, "hostnqn")
	hostID := randomUUID()
	if err := os.WriteFile(hostNQN, []byte("nqn.2014-08.org.nvmexpress:uuid:"+hostID+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.work, "hostid"), []byte(hostID+"\n"), 0o644); err != nil {
		return err
	}
	if err := d.start("pillar-node", "-csi-endpoint", "unix://"+sock, "-node-name", "worker-0",
		"-state-dir", filepath.Join(d.work, "node"), "-kubelet-dir", d.work, "-host-nqn-file", hostNQN,
		"-host-id-file", filepath.Join(d.work, "hostid"), "-log-level", "info",
		// The demo plays kubelet's part itself: nothing to register with.
		"-plugin-registration-dir="); err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ident := csi.NewIdentityClient(conn)
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p, err := ident.Probe(ctx, &csi.ProbeRequest{})
		cancel()
		if err == nil && p.GetReady().GetValue() {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pillar-node not ready after a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.node = csi.NewNodeClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	info, err := d.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("NodeGetInfo: %w", err)
	}
	if d.nodeID, err = export.ParseNodeID(info.GetNodeId()); err != nil {
		return err
	}
	fmt.Printf("node_id %s\n", info.GetNodeId())
	return nil
}

// next issues the next publicationGeneration, as the controller does with a
// compare-and-swap on the PillarVolumeState.
func (d *demo) next() *agentv1.FencingToken {
	d.gen++
	return &agentv1.FencingToken{LifecycleUid: d.uid, PublicationGeneration: d.gen}
}

func (d *demo) exportRequest(tok *agentv1.FencingToken) *agentv1.ExportVolumeRequest {
	return &agentv1.ExportVolumeRequest{FencingToken: tok, VolumeId: volumeID, Store: d.store,
		Transport: &agentv1.ExportVolumeRequest_NvmeofTcp{NvmeofTcp: &agentv1.NvmeofTcpExport{
			BindAddress: "127.0.0.1", Port: targetPort, AclEnabled: true}}}
}

// export exports the volume for this worker's host NQN only and returns the
// volume context the controller would hand the node.
func (d *demo) export(ctx context.Context) (map[string]string, error) {
	step("controller → agent: ExportVolume on 127.0.0.1:%d with ACL (generation %d), AllowHost %s (generation %d)",
		targetPort, d.gen+1, d.nodeID.HostNQN, d.gen+2)
	ev, err := d.agent.ExportVolume(ctx, d.exportRequest(d.next()))
	if err != nil {
		return nil, fmt.Errorf("ExportVolume: %w", err)
	}
	if _, err := d.agent.AllowHost(ctx, &agentv1.AllowHostRequest{FencingToken: d.next(), VolumeId: volumeID, HostNqn: d.nodeID.HostNQN}); err != nil {
		return nil, fmt.Errorf("AllowHost: %w", err)
	}
	e := ev.GetExport()
	fmt.Printf("subsystem %s, namespace %d uuid %s nguid %s\n", e.GetSubsystemNqn(), e.GetNamespaceId(), e.GetNamespaceUuid(), e.GetNamespaceNguid())
	ctrlLoss, delay := int32(10), int32(1)
	vc := export.VolumeContext{Transport: export.TransportTCP, Address: netip.MustParseAddr("127.0.0.1"), Port: targetPort, SubsystemNQN: e.GetSubsystemNqn(),
		Connect: export.ConnectOptions{CtrlLossTimeoutSeconds: &ctrlLoss, ReconnectDelaySeconds: &delay}}
	return vc.Map(), nil
}

// stageWriteRead stages and publishes the volume, checks the data of an
// earlier round (want) or writes new data, then unpublishes and unstages.
func (d *demo) stageWriteRead(ctx context.Context, vctx map[string]string, want []byte) ([]byte, error) {
	staging := filepath.Join(d.work, "staging")
	target := filepath.Join(d.work, "pod-volume")
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	step("kubelet → node: NodeStageVolume (connect, find the namespace by UUID, mkfs if blank, mount) and NodePublishVolume")
	start := time.Now()
	if _, err := d.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: vctx}); err != nil {
		return nil, fmt.Errorf("NodeStageVolume: %w", err)
	}
	if _, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: capability, VolumeContext: vctx}); err != nil {
		return nil, fmt.Errorf("NodePublishVolume: %w", err)
	}
	fmt.Printf("staged and published in %.1f s\n", time.Since(start).Seconds())
	if out, err := command("findmnt", "-n", "-o", "SOURCE,TARGET,FSTYPE,OPTIONS", target); err == nil {
		fmt.Print(out)
	}

	file := filepath.Join(target, "data.bin")
	var sum []byte
	if want == nil {
		step("pod: write 16 MiB of random data")
		data := make([]byte, 16<<20)
		if _, err := rand.Read(data); err != nil {
			return nil, err
		}
		if err := writeSynced(file, data); err != nil {
			return nil, err
		}
		s := sha256.Sum256(data)
		sum = s[:]
		fmt.Printf("sha256 %x\n", sum)
	} else {
		step("pod: read the data back after unstage, unexport, re-export and restage")
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		s := sha256.Sum256(data)
		sum = s[:]
		fmt.Printf("sha256 %x\n", sum)
		if string(sum) != string(want) {
			return nil, fmt.Errorf("data read back differs: sha256 %x, wrote %x", sum, want)
		}
		fmt.Println("data intact")
	}
	stats, err := d.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: volumeID, VolumePath: target})
	if err != nil {
		return nil, fmt.Errorf("NodeGetVolumeStats: %w", err)
	}
	for _, u := range stats.GetUsage() {
		fmt.Printf("stats: %s total %d used %d available %d\n", u.GetUnit(), u.GetTotal(), u.GetUsed(), u.GetAvailable())
	}

	step("kubelet → node: NodeUnpublishVolume and NodeUnstageVolume (unmount, disconnect this volume's controller)")
	if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target}); err != nil {
		return nil, fmt.Errorf("NodeUnpublishVolume: %w", err)
	}
	if _, err := d.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging}); err != nil {
		return nil, fmt.Errorf("NodeUnstageVolume: %w", err)
	}
	fmt.Println("unstaged")
	return sum, nil
}

func writeSynced(name string, data []byte) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (d *demo) showMetrics(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "pillar_agent_rpc_errors_total") || strings.HasPrefix(l, "pillar_agent_volumes") ||
			strings.HasPrefix(l, "pillar_agent_exports") || strings.HasPrefix(l, "pillar_agent_rpc_duration_seconds_count") {
			fmt.Println(l)
		}
	}
	return sc.Err()
}

// start runs one of the driver's binaries, its log on our stdout.
func (d *demo) start(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(d.bin, name), args...)
	w := prefixed(name)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return err
	}
	d.procs = append(d.procs, proc{cmd: cmd, log: w})
	return nil
}

// prefixed copies what is written to it to stdout, line by line, each line
// prefixed with name, until it is closed.
func prefixed(name string) *io.PipeWriter {
	r, w := io.Pipe()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Printf("   [%s] %s\n", name, sc.Text())
		}
	}()
	return w
}

// cleanup stops the binaries (SIGTERM, as Kubernetes does) and removes
// whatever a failed run left: mounts, the connection, the export, the store.
func (d *demo) cleanup() {
	step("cleanup")
	for i := len(d.procs) - 1; i >= 0; i-- {
		p := d.procs[i].cmd
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		select {
		case err := <-done:
			fmt.Printf("%s exited: %v\n", filepath.Base(p.Path), exitText(err))
		case <-time.After(30 * time.Second):
			_ = p.Process.Kill()
			fmt.Printf("%s did not stop in 30 s; killed\n", filepath.Base(p.Path))
		}
		d.procs[i].log.Close()
	}
	for _, m := range []string{"pod-volume", "staging"} {
		_, _ = command("umount", filepath.Join(d.work, m))
	}
	_, _ = command("nvme", "disconnect", "-n", mustNQN())
	switch d.backend {
	case "zfs":
		_, _ = command("zpool", "destroy", "-f", "demo")
	case "lvm":
		_, _ = command("vgremove", "--config", lvmConfig, "-f", "demo")
	}
	if d.loop != "" {
		_, _ = command("losetup", "-d", d.loop)
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func mustNQN() string {
	id, _ := export.For(volumeID)
	return id.SubsystemNQN
}

func waitServing(h healthpb.HealthClient) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not SERVING after a minute: %v %v", r.GetStatus(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// command runs a tool with a deadline and returns its output; the error
// carries stderr.
func command(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
