//go:build kernel

package backends

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/fixture"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// benchVolumes is how many volumes one round creates and deletes.
const benchVolumes = 64

// BenchmarkCreateDelete64 creates and deletes 64 volumes through the
// backend, then runs the same creating and deleting commands (recorded from
// the backend's round, with other names) from a shell loop, and reports
// both per volume and their ratio. The backends' deletes check the owner
// in the command that deletes (a ZFS channel program, an lvremove that
// selects by tag); the loop runs what a script would, zfs destroy and
// lvremove of the named LV. The backend's extra work is what it adds for
// safety: the capacity and zeroing checks of a thin store (a listing per
// LVM thin create, one per 30 s for ZFS), the Go process around each
// command.
func BenchmarkCreateDelete64(b *testing.B) {
	guest.RequireGuest(b)
	b.Run("zfs-sparse", func(b *testing.B) {
		pool := fixture.NewZPool(b, fixture.PoolOptions{Size: 1 * fixture.GiB})
		benchCreateDelete(b, func(r command.InputRunner) (backends.Backend, error) {
			return zfs.New(zfs.Config{Pool: pool.Name, ParentDataset: "bench", Sparse: true, Runner: r})
		}, 8*fixture.MiB)
	})
	b.Run("lvm-thin", func(b *testing.B) {
		vg := fixture.NewVG(b, fixture.VGOptions{Size: 1 * fixture.GiB, ThinPoolSize: 768 * fixture.MiB})
		benchCreateDelete(b, func(r command.InputRunner) (backends.Backend, error) {
			return lvm.New(lvm.Config{VolumeGroup: vg.Name, ThinPool: vg.ThinPool, Runner: r})
		}, 8*fixture.MiB)
	})
}

// BenchmarkZFSDevicePath64 looks up the device node of each of 64 zvols
// with one backend, which remembers which zvol each /dev/zdN is, and with
// a new backend for each lookup, which must open every zvol device to
// find the one it wants (what every lookup did before the backend
// remembered), and reports both per lookup and their ratio. Both include
// the zfs get that each lookup runs first.
func BenchmarkZFSDevicePath64(b *testing.B) {
	guest.RequireGuest(b)
	pool := fixture.NewZPool(b, fixture.PoolOptions{Size: 1 * fixture.GiB})
	newBackend := func() backends.Backend {
		be, err := zfs.New(zfs.Config{Pool: pool.Name, ParentDataset: "bench", Sparse: true})
		if err != nil {
			b.Fatal(err)
		}
		return be
	}
	ctx := context.Background()
	warm := newBackend()
	ids := make([]string, benchVolumes)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-dev-%02d", i)
		if _, err := warm.Create(ctx, ids[i], 8*fixture.MiB); err != nil {
			b.Fatal(err)
		}
	}
	lookup := func(be backends.Backend, id string) {
		if dev, err := be.DevicePath(ctx, id); err != nil || !strings.HasPrefix(dev, "/dev/zd") {
			b.Fatalf("DevicePath(%s) = %q, %v", id, dev, err)
		}
	}
	// Every node made and remembered before the timing starts.
	for _, id := range ids {
		lookup(warm, id)
	}
	var remembered, everyDevice time.Duration
	rounds := 0
	for ; b.Loop(); rounds++ {
		start := time.Now()
		for _, id := range ids {
			lookup(warm, id)
		}
		remembered += time.Since(start)
		start = time.Now()
		for _, id := range ids {
			lookup(newBackend(), id)
		}
		everyDevice += time.Since(start)
	}
	n := float64(rounds * benchVolumes)
	b.ReportMetric(remembered.Seconds()*1000/n, "remembered-ms/lookup")
	b.ReportMetric(everyDevice.Seconds()*1000/n, "every-device-ms/lookup")
	b.ReportMetric(everyDevice.Seconds()/remembered.Seconds(), "every-device/remembered")
}

// mutations records the commands that create or destroy a volume, and
// counts and times every command the backend runs by its first two
// words ("zfs list", "lvm lvcreate"), so that the difference from the shell
// loop can be read down to the tool call that makes it.
type mutations struct {
	command.Exec
	mu    sync.Mutex
	argv  [][]string
	calls map[string]*callStat
}

// callStat is how often one kind of command ran and for how long.
type callStat struct {
	n    int
	took time.Duration
}

func (m *mutations) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return m.RunInput(ctx, nil, name, args...)
}

func (m *mutations) RunInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error) {
	start := time.Now()
	out, err := m.Exec.RunInput(ctx, input, name, args...)
	took := time.Since(start)
	kind := name
	if len(args) > 0 && (name == "zfs" || name == "zpool" || name == "lvm") {
		kind += "_" + args[0]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = make(map[string]*callStat)
	}
	if m.calls[kind] == nil {
		m.calls[kind] = &callStat{}
	}
	m.calls[kind].n++
	m.calls[kind].took += took
	switch {
	case err != nil || len(args) == 0:
	case name == "zfs" && args[0] == "program" && len(args) >= 5:
		// The ZFS backend's delete, a channel program that checks the
		// owner and destroys: what a script would do is zfs destroy.
		m.argv = append(m.argv, []string{"zfs", "destroy", args[4]})
	case args[0] == "lvremove" && len(args) == 7 && args[4] == "--select":
		// The LVM backend's delete selects the LV by name and tag: a
		// script would name it (lvremove --config C --yes VG/LV).
		lv, _, _ := strings.Cut(strings.TrimPrefix(args[5], `lv_name="`), `"`)
		m.argv = append(m.argv, []string{name, "lvremove", args[1], args[2], "--yes", args[6] + "/" + lv})
	case args[0] == "create" || args[0] == "destroy" || args[0] == "lvcreate" || args[0] == "lvremove":
		m.argv = append(m.argv, append([]string{name}, args...))
	}
	return out, err
}

func benchCreateDelete(b *testing.B, newBackend func(command.InputRunner) (backends.Backend, error), size int64) {
	// One volume first, untimed: the ZFS backend makes its parent dataset
	// on the first create.
	warm, err := newBackend(command.Exec{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := warm.Create(context.Background(), "bench-warm-up", size); err != nil {
		b.Fatal(err)
	}
	if err := warm.Delete(context.Background(), "bench-warm-up"); err != nil {
		b.Fatal(err)
	}
	var backendTime, shellTime time.Duration
	calls := make(map[string]*callStat)
	script := filepath.Join(b.TempDir(), "loop.sh")
	rounds := 0
	for ; b.Loop(); rounds++ {
		round := rounds
		rec := &mutations{}
		be, err := newBackend(rec)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		ids := make([]string, benchVolumes)
		for i := range ids {
			ids[i] = fmt.Sprintf("bench-b%d-%02d", round, i)
		}
		start := time.Now()
		for _, id := range ids {
			if _, err := be.Create(ctx, id, size); err != nil {
				b.Fatal(err)
			}
		}
		for _, id := range ids {
			if err := be.Delete(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		backendTime += time.Since(start)
		for kind, c := range rec.calls {
			if calls[kind] == nil {
				calls[kind] = &callStat{}
			}
			calls[kind].n += c.n
			calls[kind].took += c.took
		}

		if len(rec.argv) != 2*benchVolumes {
			b.Fatalf("recorded %d create/destroy commands, want %d", len(rec.argv), 2*benchVolumes)
		}
		var sh strings.Builder
		sh.WriteString("set -e\nexport LC_ALL=C\n")
		for _, argv := range rec.argv {
			for i, a := range argv {
				if i > 0 {
					sh.WriteByte(' ')
				}
				// Same command, another volume: bench-bN- becomes bench-sN-.
				sh.WriteString(shellQuote(strings.ReplaceAll(a, fmt.Sprintf("bench-b%d-", round), fmt.Sprintf("bench-s%d-", round))))
			}
			sh.WriteString(" >/dev/null\n")
		}
		if err := os.WriteFile(script, []byte(sh.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if out, err := (command.Exec{Timeout: 30 * time.Minute}).Run(ctx, "sh", script); err != nil {
			b.Fatalf("shell loop: %v: %s", err, out)
		}
		shellTime += time.Since(start)
	}
	n := float64(rounds * benchVolumes)
	b.ReportMetric(backendTime.Seconds()*1000/n, "backend-ms/vol")
	b.ReportMetric(shellTime.Seconds()*1000/n, "shell-ms/vol")
	b.ReportMetric(backendTime.Seconds()/shellTime.Seconds(), "backend/shell")
	kinds := make([]string, 0, len(calls))
	for kind := range calls {
		kinds = append(kinds, kind)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		c := calls[kind]
		b.Logf("%s: %.2f calls/vol, %.1f ms/call, %.1f ms/vol", kind, float64(c.n)/n, c.took.Seconds()*1000/float64(c.n), c.took.Seconds()*1000/n)
		b.ReportMetric(float64(c.n)/n, kind+"-calls/vol")
		b.ReportMetric(c.took.Seconds()*1000/n, kind+"-ms/vol")
	}
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
