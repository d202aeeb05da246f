package cluster

import (
	"strings"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	// A comm with a space and a parenthesis, as containerd-shim and
	// kernel threads have.
	line := "4242 (kube (api) s) S 1 4242 4242 0 -1 4194560 12 0 0 0 1234 567 0 0 20 0 9 0 100 0 0\n"
	p, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != 4242 || p.Comm != "kube (api) s" || p.Seconds != 18.01 {
		t.Fatalf("parsed %+v, want pid 4242, comm %q, 18.01 s", p, "kube (api) s")
	}
	for _, bad := range []string{"", "12 no-parens S", "x (a) S 1", "7 (a) S 1 2 3 4 5 6 7 8 9 10 x 1 2"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) accepted it", bad)
		}
	}
}

func TestCPUTotals(t *testing.T) {
	got := cpuTotals([]byte("cpu  100 50 200 1000 10 5 5 300 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	want := "user 2s, system 2s, idle 10s, iowait 0s, irq+softirq 0s, steal 3s"
	if got != want {
		t.Fatalf("cpuTotals = %q, want %q", got, want)
	}
	if got := cpuTotals([]byte("intr 1 2 3\n")); !strings.Contains(got, "no cpu line") {
		t.Fatalf("cpuTotals without a cpu line = %q", got)
	}
}

func TestTop(t *testing.T) {
	got := top([]ProcCPU{{1, "a", 1}, {2, "b", 3}, {3, "c", 2}}, 2)
	want := "        3.0        2  b\n        2.0        3  c\n"
	if got != want {
		t.Fatalf("top = %q, want %q", got, want)
	}
}
