package lvm_test

import (
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
	} {
		if _, err := lvm.New(c); !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: New(%+v) = %v, want ErrInvalidArgument", name, c, err)
		}
	}
	for _, c := range []lvm.Config{
		{VolumeGroup: "vg0"},
		{VolumeGroup: "vg_data+1.x", ThinPool: "thinpool", OvercommitRatio: 2.5},
		{VolumeGroup: strings.Repeat("v", 81)},
	} {
		if _, err := lvm.New(c); err != nil {
			t.Errorf("New(%+v) = %v", c, err)
		}
	}
}
