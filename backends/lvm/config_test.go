package lvm_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
)

func TestConfigRefused(t *testing.T) {
	for name, c := range map[string]lvm.Config{
		"no group":         {},
		"leading hyphen":   {VolumeGroup: "-vg"},
		"dot":              {VolumeGroup: "."},
		"dotdot":           {VolumeGroup: ".."},
		"slash":            {VolumeGroup: "vg/x"},
		"space":            {VolumeGroup: "vg x"},
		"too long for LVs": {VolumeGroup: strings.Repeat("v", 82)},
		"hyphens count":    {VolumeGroup: strings.Repeat("v-", 40)},
		"bad thin pool":    {VolumeGroup: "vg0", ThinPool: "-pool"},
		"ratio below 1":    {VolumeGroup: "vg0", OvercommitRatio: 0.99},
		"ratio NaN":        {VolumeGroup: "vg0", OvercommitRatio: math.NaN()},
		"empty reject":     {VolumeGroup: "vg0", RejectDevices: []string{""}},
		"reject with bar":  {VolumeGroup: "vg0", RejectDevices: []string{"^/dev/zd|a"}},
		"reject quoted":    {VolumeGroup: "vg0", RejectDevices: []string{`^/dev/"zd`}},
		"reject escape":    {VolumeGroup: "vg0", RejectDevices: []string{`^/dev/zd\.`}},
		"reject no regexp": {VolumeGroup: "vg0", RejectDevices: []string{"^/dev/(zd"}},
	} {
		if _, err := lvm.New(c); !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: New(%+v) = %v, want ErrInvalidArgument", name, c, err)
		}
	}
	for _, c := range []lvm.Config{
		{VolumeGroup: "vg0"},
		{VolumeGroup: "vg_data+1.x", ThinPool: "thinpool", OvercommitRatio: 2.5},
		{VolumeGroup: strings.Repeat("v", 81)},
		{VolumeGroup: "vg0", RejectDevices: []string{"^/dev/zd", "^/dev/nvme[0-9]+n"}},
	} {
		if _, err := lvm.New(c); err != nil {
			t.Errorf("New(%+v) = %v", c, err)
		}
	}
}

// recorder fails every command and keeps its arguments.
type recorder struct{ calls [][]string }

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.calls = append(r.calls, append([]string{name}, args...))
	return nil, errors.New("not run")
}

func TestRejectDevicesBecomeTheGlobalFilter(t *testing.T) {
	for _, tc := range []struct {
		reject []string
		want   string
	}{
		{nil, lvm.LVMConfig},
		{[]string{"^/dev/zd", "^/dev/nvme"}, `activation { udev_sync=0 udev_rules=0 } devices { obtain_device_list_from_udev=0 global_filter=[ "r|^/dev/zd|", "r|^/dev/nvme|" ] }`},
	} {
		rec := &recorder{}
		b, err := lvm.New(lvm.Config{VolumeGroup: "vg0", RejectDevices: tc.reject, Runner: rec})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = b.Capacity(context.Background())
		if len(rec.calls) == 0 {
			t.Fatal("Capacity ran no command")
		}
		for _, c := range rec.calls {
			if len(c) < 4 || c[0] != "lvm" || c[2] != "--config" || c[3] != tc.want {
				t.Errorf("reject %q: command %q, want lvm CMD --config %q ...", tc.reject, c, tc.want)
			}
		}
	}
}
