package lvm

import (
	"context"
	"strconv"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
)

// zeroLV zeroes a chunk at a time and moves the zero tag after each, so a
// call cut short resumes at the last chunk done.
func TestZeroLVChunks(t *testing.T) {
	const dev, target = "/dev/mapper/vg0-pvc--1", "vg0/pvc-1"
	from, to := int64(4<<20), int64(4<<20)+zeroChunk+(8<<20)
	lvm := func(args ...string) []string {
		return append([]string{"lvm", "lvchange", "--config", LVMConfig}, args...)
	}
	r := commandtest.New(t,
		commandtest.Step{Argv: []string{"blkdiscard", "--zeroout", "--offset", strconv.FormatInt(from, 10), "--length", strconv.FormatInt(zeroChunk, 10), dev}},
		commandtest.Step{Argv: lvm("--deltag", zeroTag(from), "--addtag", zeroTag(from+zeroChunk), target)},
		commandtest.Step{Argv: []string{"blkdiscard", "--zeroout", "--offset", strconv.FormatInt(from+zeroChunk, 10), "--length", strconv.FormatInt(8<<20, 10), dev}},
		commandtest.Step{Argv: lvm("--deltag", zeroTag(from+zeroChunk), target)},
	)
	b, err := New(Config{VolumeGroup: "vg0", Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.zeroLV(context.Background(), "pvc-1", dev, from, to); err != nil {
		t.Fatal(err)
	}
}

func TestZeroFrom(t *testing.T) {
	for _, c := range []struct {
		tags []string
		from int64
		ok   bool
	}{
		{nil, 0, false},
		{[]string{TagPrefix + "pvc-1"}, 0, false},
		{[]string{TagPrefix + "pvc-1", zeroTag(0)}, 0, true},
		{[]string{zeroTag(1 << 30), TagPrefix + "pvc-1"}, 1 << 30, true},
		{[]string{zeroTagPrefix + "x"}, 0, false},
		{[]string{zeroTagPrefix + "-4"}, 0, false},
	} {
		l := &lv{tags: c.tags}
		if from, ok := l.zeroFrom(); from != c.from || ok != c.ok {
			t.Errorf("tags %q: zeroFrom = %d, %v; want %d, %v", c.tags, from, ok, c.from, c.ok)
		}
	}
}
