package zfs_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
)

func TestConfigRefused(t *testing.T) {
	for name, c := range map[string]zfs.Config{
		"no pool":              {},
		"pool starts digit":    {Pool: "1tank"},
		"pool with slash":      {Pool: "tank/x"},
		"parent empty part":    {Pool: "tank", ParentDataset: "a//b"},
		"parent leading slash": {Pool: "tank", ParentDataset: "/a"},
		"parent dot":           {Pool: "tank", ParentDataset: "a/.."},
		"parent space":         {Pool: "tank", ParentDataset: "a b"},
		"volsize":              {Pool: "tank", Properties: map[string]string{"volsize": "1G"}},
		"refreservation":       {Pool: "tank", Properties: map[string]string{"refreservation": "none"}},
		"reservation":          {Pool: "tank", Properties: map[string]string{"reservation": "none"}},
		"owner":                {Pool: "tank", Properties: map[string]string{zfs.OwnerProperty: "x"}},
		"snapshot owner":       {Pool: "tank", Properties: map[string]string{zfs.SnapshotProperty: "x"}},
		"clone mark":           {Pool: "tank", Properties: map[string]string{zfs.CloneProperty: "x"}},
		"bad name":             {Pool: "tank", Properties: map[string]string{"Compression": "lz4"}},
		"empty value":          {Pool: "tank", Properties: map[string]string{"compression": ""}},
		"newline value":        {Pool: "tank", Properties: map[string]string{"io.x:y": "a\nb"}},
		"long value":           {Pool: "tank", Properties: map[string]string{"io.x:y": strings.Repeat("v", 1025)}},
		"volblocksize 3k":      {Pool: "tank", Properties: map[string]string{"volblocksize": "3k"}},
		"volblocksize 256":     {Pool: "tank", Properties: map[string]string{"volblocksize": "256"}},
		"volblocksize 32M":     {Pool: "tank", Properties: map[string]string{"volblocksize": "32M"}},
		"volblocksize word":    {Pool: "tank", Properties: map[string]string{"volblocksize": "big"}},
		"ratio below 1":        {Pool: "tank", OvercommitRatio: 0.5},
		"ratio NaN":            {Pool: "tank", OvercommitRatio: math.NaN()},
		"ratio Inf":            {Pool: "tank", OvercommitRatio: math.Inf(1)},
		"negative timeout":     {Pool: "tank", DeviceTimeout: -1},
		"volmode full":         {Pool: "tank", Properties: map[string]string{"volmode": "full"}},
		"volmode geom":         {Pool: "tank", Properties: map[string]string{"volmode": "geom"}},
		"volmode default":      {Pool: "tank", Properties: map[string]string{"volmode": "default"}},
	} {
		if _, err := zfs.New(c); !errors.Is(err, backends.ErrInvalidArgument) {
			t.Errorf("%s: New(%+v) = %v, want ErrInvalidArgument", name, c, err)
		}
	}
}

// TestCreateOptions checks the zfs create command line built from a
// configuration: properties sorted, volblocksize normalised to bytes and
// used for rounding, volmode taken from the properties when given, the
// owner property last.
func TestCreateOptions(t *testing.T) {
	r := commandtest.New(t,
		// A sparse store checks capacity first: an empty pool.
		commandtest.Step{Argv: []string{"zfs", "list", "-Hp", "-r", "-t", "filesystem,volume", "-o",
			"name,used,available,volsize,refreservation,referenced", "tank"}, Stdout: "tank\t100\t1000000\t-\t0\t24\n"},
		commandtest.Step{Argv: []string{"zfs", "create", "-s", "-V", "16384",
			"-o", "volblocksize=8192", "-o", "compression=lz4", "-o", "io.example:team=storage", "-o", "volmode=none",
			"-o", "io.pillar-csi:volume-id=pvc-1", "tank/pvc-1"}},
	)
	b, err := zfs.New(zfs.Config{Pool: "tank", Sparse: true, Runner: r,
		Properties: map[string]string{"volmode": "none", "volblocksize": "8K", "compression": "lz4", "io.example:team": "storage"}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := b.Create(context.Background(), "pvc-1", 8193)
	if err != nil {
		t.Fatal(err)
	}
	if want := (backends.Volume{ID: "pvc-1", Name: "tank/pvc-1", SizeBytes: 16384, Thin: true}); *v != want {
		t.Fatalf("created %+v, want %+v", *v, want)
	}
}

// TestNameTooLong: a zvol name over ZFS's 255 bytes is refused before any
// command runs (the runner expects none).
func TestNameTooLong(t *testing.T) {
	b, err := zfs.New(zfs.Config{Pool: strings.Repeat("p", 100), ParentDataset: strings.Repeat("d", 30), Runner: commandtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Create(context.Background(), strings.Repeat("v", backends.MaxVolumeIDLength), 1)
	if !errors.Is(err, backends.ErrInvalidArgument) {
		t.Fatalf("Create = %v, want ErrInvalidArgument", err)
	}
}
