package controller_test

import (
	"context"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCrashBetweenSteps: the controller's context is cancelled right after
// the agent did each step's work and before the controller recorded it —
// a controller killed between two steps. A fresh controller retries the
// same call and everything converges: no second backend volume, no
// orphaned export or host, the record true to the agent.
func TestCrashBetweenSteps(t *testing.T) {
	needServer(t)
	steps := []struct {
		method string
		call   func(ctx context.Context, s interface {
			csi.ControllerServer
		}, id string) error
		// last: what follows the agent's call may not notice the
		// cancellation, so the answer may beat it (after ExportVolume:
		// the status write, under a deadline of its own, and a read of
		// the protocol from the informer cache).
		last bool
	}{
		{"CreateVolume", create, false},
		{"ExportVolume", create, true},
		{"AllowHost", publish, true},
		{"DenyHost", unpublish, false},
		{"ExpandVolume", expand, false},
		{"DeleteVolume", remove, false},
	}
	main := uniq("pvc-crash")
	for _, st := range steps {
		t.Run(st.method, func(t *testing.T) {
			// The crash in CreateVolume needs a volume of its own: the
			// others share one, provisioned by the ExportVolume step.
			id := main
			if st.method == "CreateVolume" {
				id = uniq("pvc-crash-create")
				defer func() {
					if err := remove(context.Background(), newService(t), id); err != nil {
						t.Error(err)
					}
				}()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			agent.AfterNext(st.method, cancel)
			err := st.call(ctx, newService(t), id)
			if c := status.Code(err); c != codes.Canceled && c != codes.Unavailable && (err != nil || !st.last) {
				t.Fatalf("the crashed call: %v, want it cut short (Canceled or Unavailable)", err)
			}
			if err := st.call(context.Background(), newService(t), id); err != nil {
				t.Fatalf("the retry by a fresh controller: %v", err)
			}
			check(t, id, st.method)
		})
	}
}

func create(ctx context.Context, s interface{ csi.ControllerServer }, id string) error {
	_, err := s.CreateVolume(ctx, createReq(id, 8<<20))
	return err
}

func publish(ctx context.Context, s interface{ csi.ControllerServer }, id string) error {
	_, err := s.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeA, VolumeCapability: rwo})
	return err
}

func unpublish(ctx context.Context, s interface{ csi.ControllerServer }, id string) error {
	_, err := s.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeA})
	return err
}

func expand(ctx context.Context, s interface{ csi.ControllerServer }, id string) error {
	_, err := s.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}, VolumeCapability: rwo})
	return err
}

func remove(ctx context.Context, s interface{ csi.ControllerServer }, id string) error {
	_, err := s.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	return err
}

// check compares the record with the agent after each step.
func check(t *testing.T, id, after string) {
	t.Helper()
	vol, hasVol := agent.Volumes()[id]
	exp, hasExp := agent.Exports()[id]
	switch after {
	case "CreateVolume", "ExportVolume":
		v := record(t, id)
		if !hasVol || !hasExp || !v.Status.BackendCreated || !v.Status.Exported {
			t.Errorf("after create: volume %v, export %v, status %+v", hasVol, hasExp, v.Status)
		}
	case "AllowHost":
		if v := record(t, id); len(v.Spec.Publications) != 1 || !slices.Equal(exp.Hosts, []string{hostA}) {
			t.Errorf("after publish: publications %v, hosts %v", v.Spec.Publications, exp.Hosts)
		}
	case "DenyHost":
		if v := record(t, id); len(v.Spec.Publications) != 0 || len(exp.Hosts) != 0 {
			t.Errorf("after unpublish: publications %v, hosts %v", v.Spec.Publications, exp.Hosts)
		}
	case "ExpandVolume":
		if v := record(t, id); vol.Size != 32<<20 || v.Status.CapacityBytes != 32<<20 || v.Spec.CapacityBytes != 32<<20 {
			t.Errorf("after expand: backend %d, record %d/%d", vol.Size, v.Spec.CapacityBytes, v.Status.CapacityBytes)
		}
	case "DeleteVolume":
		if hasVol || hasExp {
			t.Errorf("after delete: volume %v, export %v left", hasVol, hasExp)
		}
	}
}
