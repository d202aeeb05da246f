package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc: 100 on every
// Linux architecture the lab runs.
const clockTicks = 100

// ProcCPU is one process's CPU time since it started.
type ProcCPU struct {
	PID     int
	Comm    string
	Seconds float64 // user + system
}

// WriteCPUTop writes where the guest's CPU time went: the totals of
// /proc/stat (user, system, idle, steal) and the n processes that used
// the most CPU, alive at the time of the call. A suite that ran slowly
// prints it, so the run's output names what kept the vCPUs busy (probes
// time out and pods restart when the guest is saturated, and the log of
// each pod does not say why).
func WriteCPUTop(w io.Writer, n int) {
	if stat, err := os.ReadFile("/proc/stat"); err == nil {
		fmt.Fprintf(w, "guest CPU time: %s\n", cpuTotals(stat))
	}
	fmt.Fprintf(w, "processes by CPU time used (user+system, seconds):\n%s", top(ProcessCPU(), n))
}

// top formats the n processes of procs with the most CPU seconds, one per
// line, most first.
func top(procs []ProcCPU, n int) string {
	sort.Slice(procs, func(i, j int) bool { return procs[i].Seconds > procs[j].Seconds })
	if len(procs) > n {
		procs = procs[:n]
	}
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "  %9.1f  %7d  %s\n", p.Seconds, p.PID, p.Comm)
	}
	return b.String()
}

// ProcessCPU reads the CPU time of every process in /proc. Processes that
// exit while it reads are left out.
func ProcessCPU() []ProcCPU {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []ProcCPU
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		p, err := parseProcStat(b)
		if err != nil {
			continue
		}
		// The command line says which kube binary or which pod's process
		// it is; comm alone is 15 bytes of the name.
		if cmd, err := os.ReadFile(filepath.Join(d, "cmdline")); err == nil && len(cmd) > 0 {
			args := strings.Fields(strings.ReplaceAll(string(bytes.TrimRight(cmd, "\x00")), "\x00", " "))
			if len(args) > 3 {
				args = args[:3]
			}
			p.Comm = strings.Join(args, " ")
		}
		out = append(out, p)
	}
	return out
}

// parseProcStat reads pid, comm, utime and stime from a /proc/PID/stat
// line. comm is in parentheses and may itself hold spaces and
// parentheses, so the fields after it are counted from its last ')'.
func parseProcStat(b []byte) (ProcCPU, error) {
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return ProcCPU{}, fmt.Errorf("no command in %q", s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return ProcCPU{}, fmt.Errorf("pid: %w", err)
	}
	// After comm: state (field 3) ... utime (14), stime (15).
	rest := strings.Fields(s[end+1:])
	if len(rest) < 13 {
		return ProcCPU{}, fmt.Errorf("short stat line %q", s)
	}
	utime, err := strconv.ParseUint(rest[11], 10, 64)
	if err != nil {
		return ProcCPU{}, fmt.Errorf("utime: %w", err)
	}
	stime, err := strconv.ParseUint(rest[12], 10, 64)
	if err != nil {
		return ProcCPU{}, fmt.Errorf("stime: %w", err)
	}
	return ProcCPU{PID: pid, Comm: s[open+1 : end], Seconds: float64(utime+stime) / clockTicks}, nil
}

// cpuTotals summarises the "cpu" line of /proc/stat in seconds summed
// over every vCPU.
func cpuTotals(stat []byte) string {
	for _, line := range strings.Split(string(stat), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		sec := func(i int) float64 {
			v, _ := strconv.ParseUint(f[i], 10, 64)
			return float64(v) / clockTicks
		}
		// user nice system idle iowait irq softirq steal
		return fmt.Sprintf("user %.0fs, system %.0fs, idle %.0fs, iowait %.0fs, irq+softirq %.0fs, steal %.0fs",
			sec(1)+sec(2), sec(3), sec(4), sec(5), sec(6)+sec(7), sec(8))
	}
	return "no cpu line in /proc/stat"
}

// WatchCPU writes, every interval until ctx ends, the n processes that
// used the most CPU during that interval (processes started in it count
// from their start). Cumulative figures hide a pod restarted ten times;
// these show what saturated the guest while it was slow.
func WatchCPU(ctx context.Context, w io.Writer, every time.Duration, n int) {
	prev := map[int]float64{}
	for _, p := range ProcessCPU() {
		prev[p.PID] = p.Seconds
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Only the live processes are kept: a PID reused by a new
		// process must not inherit the old one's seconds.
		now, seen := ProcessCPU(), make(map[int]float64)
		var total float64
		for i := range now {
			seen[now[i].PID] = now[i].Seconds
			now[i].Seconds -= prev[now[i].PID]
			total += now[i].Seconds
		}
		prev = seen
		fmt.Fprintf(w, "guest CPU in the last %v (uptime %.0fs): %.0f s used by processes\n%s",
			every, Uptime().Seconds(), total, top(now, n))
	}
}
