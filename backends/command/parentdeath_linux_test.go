package command_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// parentProbeEnv makes the test binary act as a storage agent instead of
// running tests: it runs a long command through Exec, which writes its PID
// to the file the variable names, and waits for it.
const parentProbeEnv = "PILLAR_COMMAND_PARENT_PROBE"

func init() {
	pidFile := os.Getenv(parentProbeEnv)
	if pidFile == "" {
		return
	}
	// The shell writes its PID atomically, then becomes sleep.
	_, err := command.Exec{Timeout: 5 * time.Minute}.Run(context.Background(), "sh", "-c",
		`echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300`, pidFile)
	os.Stderr.WriteString("the command ended: " + errString(err) + "\n")
	os.Exit(3)
}

func errString(err error) string {
	if err == nil {
		return "without error"
	}
	return err.Error()
}

// TestExecCommandDiesWithItsParent SIGKILLs a process that is running a
// command through Exec, as the OOM killer or kubelet would kill
// pillar-agent, and requires the command to die with it.
func TestExecCommandDiesWithItsParent(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	agent := exec.Command(self, "-test.run=^$")
	agent.Env = append(os.Environ(), parentProbeEnv+"="+pidFile)
	var stderr bytes.Buffer
	agent.Stderr = &stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = agent.Wait(); close(done) }()
	t.Cleanup(func() {
		agent.Process.Kill()
		<-done
	})

	var pid int
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatalf("PID file holds %q", b)
			}
			break
		}
		select {
		case <-done:
			t.Fatalf("the agent process exited before its command started: %v\n%s", waitErr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The command is the agent's child and is sleeping.
	if ppid, state := processParent(t, pid); ppid != agent.Process.Pid || state == "Z" {
		t.Fatalf("process %d: parent %d, state %s; want a running child of the agent %d", pid, ppid, state, agent.Process.Pid)
	}

	agent.Process.Signal(syscall.SIGKILL)
	<-done
	killed := time.Now()
	for {
		state, alive := processState(pid)
		if !alive || state == "Z" {
			t.Logf("the command was gone %v after the agent's SIGKILL", time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Since(killed) > 10*time.Second {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the command %d still runs (state %s) 10s after its agent was SIGKILLed", pid, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processParent returns the parent PID and state letter of pid.
func processParent(t *testing.T, pid int) (int, string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return ppid, f[0]
}

// TestExecSurvivesExitingThreads runs commands while other goroutines end
// their threads (a goroutine that returns while locked to its thread makes
// the runtime end that thread). The parent-death signal follows the thread
// that forked a command, so a command must not be killed by the end of a
// thread its own goroutine has merely passed through. Without Run's lock
// of its thread, 9 to 20 of 56 to 85 commands were killed in 5 s on a
// loaded 2-core machine.
func TestExecSurvivesExitingThreads(t *testing.T) {
	stop := make(chan struct{})
	var killers sync.WaitGroup
	for range 2 {
		killers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ended := make(chan struct{})
				go func() {
					runtime.LockOSThread()
					close(ended)
				}()
				<-ended
			}
		})
	}
	defer killers.Wait()
	defer close(stop)

	var (
		runners      sync.WaitGroup
		mu           sync.Mutex
		runs, killed int
		first        error
	)
	deadline := time.Now().Add(3 * time.Second)
	for range 4 {
		runners.Go(func() {
			for time.Now().Before(deadline) {
				_, err := command.Exec{Timeout: time.Minute}.Run(context.Background(), "sleep", "0.01")
				mu.Lock()
				runs++
				if err != nil {
					killed++
					if first == nil {
						first = err
					}
				}
				mu.Unlock()
			}
		})
	}
	runners.Wait()
	if killed > 0 {
		t.Fatalf("%d of %d commands failed while their caller was alive; the first: %v", killed, runs, first)
	}
	t.Logf("%d commands, none killed", runs)
}
