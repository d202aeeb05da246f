package controllerapp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCSIEndpoint drives pillar-controller's CSI endpoint as the
// external-provisioner would: a volume from a generated StorageClass's
// parameters is created, published, brought back after a storage-node
// reboot, unpublished and deleted.
func TestCSIEndpoint(t *testing.T) {
	ctx := context.Background()
	v := newVolumeSetup(t, "csi", "192.0.2.20")
	fa := v.fa
	conn := csiConn(t)
	id, cc := csi.NewIdentityClient(conn), csi.NewControllerClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := id.GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != "pillar-csi.io" {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	if pr, err := id.Probe(cctx, &csi.ProbeRequest{}); err != nil || !pr.GetReady().GetValue() {
		t.Fatalf("Probe = %v, %v", pr, err)
	}
	vol, err := v.createVolume(cctx, cc, "pvc-csi-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	if fa.Volumes()["pvc-csi-endpoint"].Size != 64<<20 || vol.GetVolume().GetVolumeContext()["pillar-csi.io/targetAddress"] != "192.0.2.20" {
		t.Errorf("volume %v, agent has %v", vol.GetVolume(), fa.Volumes())
	}
	const node = "worker-1/nqn.2014-08.org.nvmexpress:uuid:11111111-0000-4000-8000-000000000001"
	if _, err := cc.ControllerPublishVolume(cctx, &csi.ControllerPublishVolumeRequest{VolumeId: "pvc-csi-endpoint", NodeId: node, VolumeCapability: mountRWO}); err != nil {
		t.Fatal(err)
	}
	if h := fa.Exports()["pvc-csi-endpoint"].Hosts; len(h) != 1 {
		t.Errorf("allowed hosts %v", h)
	}
	// The storage node reboots: configfs is empty, the agent comes back as
	// a new instance; the controller pushes the export back, with the
	// published node's host, and says so on the PillarAgent.
	fa.WipeExports()
	start := time.Now()
	if err := fa.Restart(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, quick, func() error {
		e, ok := fa.Exports()["pvc-csi-endpoint"]
		if !ok || len(e.Hosts) != 1 || e.Hosts[0] != "nqn.2014-08.org.nvmexpress:uuid:11111111-0000-4000-8000-000000000001" {
			return fmt.Errorf("export after the reboot: %+v, %v", e, ok)
		}
		return nil
	})
	t.Logf("export restored %v after the agent came back", time.Since(start).Round(10*time.Millisecond))
	waitEvent(t, "agent-csi", "NodeRebooted", quick)
	waitEvent(t, "agent-csi", "ExportsPushed", quick)

	if _, err := cc.ControllerUnpublishVolume(cctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: "pvc-csi-endpoint", NodeId: node}); err != nil {
		t.Fatal(err)
	}
	// A read-only PersistentVolume made by hand for the volume holds the
	// delete back (the cached, indexed lookup of the real controller).
	ro := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-csi-endpoint-ro"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")},
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: "pillar-csi.io", VolumeHandle: "pvc-csi-endpoint", FSType: "ext4"}},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
	}}
	mustCreate(t, ro)
	eventually(t, quick, func() error {
		_, err := cc.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-csi-endpoint"})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "pvc-csi-endpoint-ro") {
			return fmt.Errorf("DeleteVolume while another PV names the volume: %v, want FAILED_PRECONDITION naming it", err)
		}
		return nil
	})
	if _, ok := fa.Volumes()["pvc-csi-endpoint"]; !ok {
		t.Fatal("the volume was deleted while another PV named it")
	}
	if err := admin.Delete(ctx, ro); err != nil {
		t.Fatal(err)
	}
	// The API server gave it the kubernetes.io/pv-protection finalizer,
	// which kube-controller-manager (not run here) drops once no pod
	// uses the PV; until then it still counts.
	get(t, ro.Name, ro)
	ro.Finalizers = nil
	if err := admin.Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	eventually(t, quick, func() error {
		_, err := cc.DeleteVolume(cctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-csi-endpoint"})
		return err
	})
	if len(fa.Volumes()) != 0 || len(fa.Exports()) != 0 {
		t.Errorf("left on the agent: %v, %v", fa.Volumes(), fa.Exports())
	}
	// The calls and the volumes show on /metrics.
	eventually(t, quick, func() error {
		resp, err := http.Get(metricsURL)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, want := range []string{`pillar_controller_csi_operation_duration_seconds_count{code="OK",method="/csi.v1.Controller/CreateVolume"}`,
			`pillar_controller_volumes{state="ready"}`} {
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
	deleteAndWait(t, v.class, v.proto, v.store, v.agent)
}
