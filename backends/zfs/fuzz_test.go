package zfs

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
)

// captures returns the captured zfs commands under testdata whose
// arguments contain all of args; at least one.
func captures(f *testing.F, args ...string) []commandtest.Step {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	var out []commandtest.Step
	for _, p := range paths {
		s := commandtest.Load(f, p)
		if s.Argv[0] == "zfs" && !slices.ContainsFunc(args, func(a string) bool { return !slices.Contains(s.Argv, a) }) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		f.Fatalf("no captured zfs %q under testdata", args)
	}
	return out
}

// FuzzParseVolumes feeds the parser of zfs list -Hp -o volumeProps
// arbitrary output. What it accepts has one zvol per non-empty line, byte
// counts that are not negative (they become the volume's size and its
// thin or thick kind), no field with a tab or a newline, and reads back
// the same when zfs prints it again.
func FuzzParseVolumes(f *testing.F) {
	for _, s := range captures(f, "list", volumeProps) {
		if s.ExitCode == 0 {
			f.Add([]byte(s.Stdout))
		}
	}
	f.Add([]byte("tank/v\t-65536\t16384\t0\tdev\tpvc-1\n"))
	f.Add([]byte("tank/v\t65536\t16384\t-1\tdev\tpvc-1\n"))
	f.Add([]byte("tank/v\t65536\t16384\t0\tdev\n"))
	f.Add([]byte("tank/v\t65536\t16384\t0\tdev\tpvc-1\t\n\n\r\n"))
	f.Add([]byte("\t+1\t0\t0\t\t\n"))
	f.Add([]byte("tank/v\t9223372036854775808\t16384\t0\tdev\t-\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		zs, err := parseVolumes(out)
		if err != nil {
			if zs != nil {
				t.Fatalf("parseVolumes returned %d zvols with error %v", len(zs), err)
			}
			return
		}
		lines := 0
		for l := range strings.Lines(string(out)) {
			if l != "\n" {
				lines++
			}
		}
		if len(zs) != lines {
			t.Fatalf("%d zvols from %d lines of %q", len(zs), lines, out)
		}
		var again strings.Builder
		for _, z := range zs {
			if z.volSize < 0 || z.volBlockSize < 0 || z.refReservation < 0 {
				t.Fatalf("accepted zvol %q with volsize %d, volblocksize %d, refreservation %d", z.name, z.volSize, z.volBlockSize, z.refReservation)
			}
			if strings.ContainsAny(z.name+z.volMode+z.owner, "\t\n") {
				t.Fatalf("accepted a field with a tab or newline: %+v", z)
			}
			again.WriteString(strings.Join([]string{z.name, strconv.FormatInt(z.volSize, 10), strconv.FormatInt(z.volBlockSize, 10),
				strconv.FormatInt(z.refReservation, 10), z.volMode, z.owner}, "\t") + "\n")
		}
		back, err := parseVolumes([]byte(again.String()))
		if err != nil || !reflect.DeepEqual(back, zs) {
			t.Fatalf("the zvols printed again parse as %+v, %v; want %+v", back, err, zs)
		}
	})
}

// FuzzCapacity gives Capacity an arbitrary listing of the pool's
// filesystems and volumes, for a thick and a sparse store. A listing one
// accepts the other accepts too, with figures that are not negative, and
// the same total; the sparse store (overcommit ratio 1) has no more
// available than the pool has free, however large or many the sparse
// zvols: a wrong figure there admits sparse volumes into space that is
// not there.
func FuzzCapacity(f *testing.F) {
	list := captures(f, "list", "name,used,available,volsize,refreservation,referenced")
	for _, s := range list {
		if s.ExitCode == 0 {
			f.Add([]byte(s.Stdout))
		}
	}
	f.Add([]byte("tank\t-1\t100\t-\t0\t0\n"))
	f.Add([]byte("tank\t100\t100\t-\t0\t0\ntank/v\t0\t0\t-4611686018427387904\t0\t0\n"))
	f.Add([]byte("tank\t4611686018427387904\t4611686018427387904\t-\t0\t0\n"))
	f.Add([]byte("tank\t1\t1\t-\t0\t0\nother/v\t0\t0\t4611686018427387904\t0\t0\ntank/v\t0\t0\t4611686018427387904\t0\t0\n"))
	f.Add([]byte("tank\t9223372036854775806\t1\t-\t0\t0\ntank/v\t0\t0\t2\t0\t0\n"))
	f.Add([]byte("tank/pillar/vols\t1\t2\t-\t0\t0\n"))
	step := list[0]
	f.Fuzz(func(t *testing.T, out []byte) {
		s := step
		s.Stdout = string(out)
		capacity := func(sparse bool) *backends.Capacity {
			b, err := New(Config{Pool: "tank", ParentDataset: "pillar/vols", Sparse: sparse, Runner: commandtest.New(t, s)})
			if err != nil {
				t.Fatal(err)
			}
			c, err := b.Capacity(context.Background())
			if (c == nil) == (err == nil) {
				t.Fatalf("Capacity = %+v, %v", c, err)
			}
			if c != nil && (c.TotalBytes < 0 || c.AvailableBytes < 0 || c.AvailableBytes > c.TotalBytes) {
				t.Fatalf("listing %q, sparse %v: capacity %+v", out, sparse, *c)
			}
			return c
		}
		thick, sparse := capacity(false), capacity(true)
		switch {
		case (thick == nil) != (sparse == nil):
			t.Fatalf("listing %q: thick capacity %+v, sparse %+v", out, thick, sparse)
		case thick == nil:
		case sparse.TotalBytes != thick.TotalBytes || sparse.AvailableBytes > thick.AvailableBytes:
			t.Fatalf("listing %q: sparse capacity %+v, thick %+v", out, *sparse, *thick)
		}
	})
}

// FuzzDestroyVerdict gives Delete an arbitrary answer of zfs program -j
// running destroy.lua. Delete succeeds only on the verdicts "destroyed"
// and "absent"; a zvol that is not ours or not a volume is a conflict,
// one with snapshots or open (EBUSY) is busy, and anything else, such as
// output that is not the program's JSON, is an error, never a success.
func FuzzDestroyVerdict(f *testing.F) {
	var step commandtest.Step
	for _, s := range captures(f, "program", "-j") {
		if s.ExitCode == 0 {
			f.Add([]byte(s.Stdout))
			step = s
		}
	}
	for _, r := range []string{"destroyed\tx", "absent", "deferred", "other\tfilesystem", "foreign\tpvc-2", "snapshots", "failed\t2", "failed\t-16", "failed\t99999999999999999999", "", "\tdestroyed"} {
		b, _ := json.Marshal(map[string]string{"return": r})
		f.Add(b)
	}
	f.Add([]byte(`{"RETURN":"destroyed"}`))
	f.Add([]byte(`{"return":"foreign\t","return":"destroyed"}`))
	f.Add([]byte(`{"return":16}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`destroyed`))
	// zfs program -j POOL - volume DATASET OWNERPROP ID ...
	volume := step.Argv[8]
	f.Fuzz(func(t *testing.T, out []byte) {
		s := step
		s.Stdout = string(out)
		b, err := New(Config{Pool: "tank", ParentDataset: "pillar/vols", Runner: commandtest.New(t, s)})
		if err != nil {
			t.Fatal(err)
		}
		b.busyRetries = 0
		err = b.Delete(context.Background(), volume)

		var r struct {
			Return string `json:"return"`
		}
		jerr := json.Unmarshal(out, &r)
		outcome, detail, _ := strings.Cut(r.Return, "\t")
		var be *backends.Error
		if err != nil && (!errors.As(err, &be) || be.Op != "delete" || be.Volume != volume) {
			t.Fatalf("Delete error %v is not a *backends.Error of the delete", err)
		}
		switch {
		case jerr != nil:
			if err == nil {
				t.Fatalf("Delete succeeded on output %q, which is not JSON", out)
			}
		case outcome == "destroyed" || outcome == "absent" || outcome == "deferred":
			if err != nil {
				t.Fatalf("verdict %q: Delete = %v, want success", r.Return, err)
			}
		case outcome == "other" || outcome == "foreign":
			if !errors.Is(err, backends.ErrConflict) {
				t.Fatalf("verdict %q: Delete = %v, want a conflict", r.Return, err)
			}
		case outcome == "snapshots" || outcome == "failed" && detail == strconv.Itoa(int(syscall.EBUSY)):
			if !errors.Is(err, backends.ErrBusy) {
				t.Fatalf("verdict %q: Delete = %v, want busy", r.Return, err)
			}
		case err == nil:
			t.Fatalf("verdict %q: Delete succeeded", r.Return)
		}
	})
}

// FuzzParseBlockSize holds parseBlockSize to ZFS's rule: it accepts
// exactly the spellings zfs accepts of a power of two from 512 bytes to
// 16 MiB, and returns the number they spell, computed here without
// int64 arithmetic that could wrap.
func FuzzParseBlockSize(f *testing.F) {
	for _, s := range []string{"16K", "16k", "16384", "1M", "512", "512B", "16M", "32M", "256", "0", "3K", "K", "", "+16K", "-16K", " 16K", "16KB", "16KiB",
		"17592186044417M", "18014398509481985K", "9223372036854775807", "99999999999999999999M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseBlockSize(s)
		want, ok := exactBlockSize(s)
		switch {
		case ok && (err != nil || got != want):
			t.Fatalf("parseBlockSize(%q) = %d, %v; want %d", s, got, err, want)
		case !ok && err == nil:
			t.Fatalf("parseBlockSize(%q) = %d, want an error", s, got)
		case err == nil && (got < 512 || got > 16<<20 || got&(got-1) != 0):
			t.Fatalf("parseBlockSize(%q) = %d: not a power of two from 512 to 16M", s, got)
		}
	})
}

// exactBlockSize is the number s spells as a volblocksize (digits, an
// optional k or m, an optional b) if it is a valid one.
func exactBlockSize(s string) (int64, bool) {
	if strings.HasSuffix(s, "b") || strings.HasSuffix(s, "B") {
		s = s[:len(s)-1]
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult = 1 << 10
	case strings.HasSuffix(s, "m"), strings.HasSuffix(s, "M"):
		mult = 1 << 20
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return 0, false
	}
	n.Mul(n, big.NewInt(mult))
	if !n.IsInt64() || n.Int64() < 512 || n.Int64() > 16<<20 || n.Int64()&(n.Int64()-1) != 0 {
		return 0, false
	}
	return n.Int64(), true
}

// FuzzParseSnapshots feeds the parser of zfs list -Hp -o snapshotProps
// arbitrary output. What it accepts has one snapshot per non-empty line,
// a size and a creation time that are not negative, and no field with a
// tab or a newline.
func FuzzParseSnapshots(f *testing.F) {
	f.Add([]byte("tank/pillar/pvc-1@snap-1\t1048576\t1796530000\toff\tsnap-1\n"))
	f.Add([]byte("tank/pillar/pvc-1@snap-1\t1048576\t1796530000\ton\tsnap-1\n"))
	f.Add([]byte("tank/pillar/pvc-1@pillar-clone-pvc-2\t1048576\t1796530000\ton\t-\n"))
	f.Add([]byte("tank/v@s\t-1\t0\toff\ts\n"))
	f.Add([]byte("tank/v@s\t1\t-5\toff\ts\n"))
	f.Add([]byte("tank/v@s\t1\t1\toff\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		ss, err := parseSnapshots(out)
		if err != nil {
			return
		}
		for _, s := range ss {
			if s.volSize < 0 || s.created.Unix() < 0 {
				t.Fatalf("accepted %+v from %q", s, out)
			}
			if strings.ContainsAny(s.name+s.owner, "\t\n") {
				t.Fatalf("a field with a tab or newline in %+v from %q", s, out)
			}
		}
	})
}
