package kept

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// State is the host's record of the kept cluster, in StateDir.
type State struct {
	SupervisorPID int       `json:"supervisorPID"`
	QEMUPID       int       `json:"qemuPID"`
	RunDir        string    `json:"runDir"` // the lab run's directory
	Root          string    `json:"root"`   // the workspace it was started from
	Started       time.Time `json:"started"`
	Deadline      time.Time `json:"deadline"` // when the supervisor kills QEMU
	MemoryMB      int       `json:"memoryMB"`
}

// StateDir is where the lab cache keeps its one kept cluster's state.
func StateDir(cacheDir string) string { return filepath.Join(cacheDir, "kept") }

func stateFile(dir string) string { return filepath.Join(dir, "state.json") }

// Channel is the channel of the kept cluster's guest.
func (s State) Channel() Channel { return Channel{Dir: filepath.Join(s.RunDir, "out", "kept")} }

// Console is the guest's console log.
func (s State) Console() string { return filepath.Join(s.RunDir, "console.log") }

// ErrNoState means no kept cluster runs (or ran).
var ErrNoState = errors.New("no kept lab cluster runs (make e2e-up starts one)")

// LoadState reads the state in dir; ErrNoState if there is none.
func LoadState(dir string) (State, error) {
	var s State
	err := readJSON(stateFile(dir), &s)
	if errors.Is(err, os.ErrNotExist) {
		return s, ErrNoState
	}
	if err != nil {
		return s, fmt.Errorf("read the kept cluster's state: %w", err)
	}
	return s, nil
}

// Save writes the state atomically: a client that reads it while the
// supervisor writes it must see a whole one.
func (s State) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save the kept cluster's state: %w", err)
	}
	if err := writeJSON(stateFile(dir), s); err != nil {
		return fmt.Errorf("save the kept cluster's state: %w", err)
	}
	return nil
}

// RemoveState removes the state in dir if it is still the one of run
// directory runDir (a newer kept cluster's must stay).
func RemoveState(dir, runDir string) error {
	s, err := LoadState(dir)
	if errors.Is(err, ErrNoState) || (err == nil && s.RunDir != runDir) {
		return nil
	}
	if err := os.Remove(stateFile(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the kept cluster's state: %w", err)
	}
	return nil
}

// ErrStale means the state names a guest whose QEMU is gone.
var ErrStale = errors.New("the kept lab cluster's guest is gone")

// Alive reports, with ErrStale, that the state's QEMU no longer runs.
// The process is recognised by its command line, which names the run
// directory: after a reboot of the host, or a long time, its PID may be
// another process's.
func (s State) Alive() error { return s.alive("/proc") }

func (s State) alive(proc string) error {
	if s.QEMUPID <= 0 {
		return fmt.Errorf("%w: its state names no QEMU process", ErrStale)
	}
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(s.QEMUPID), "cmdline"))
	if err != nil || !namesRun(b, s.RunDir) {
		return fmt.Errorf("%w: QEMU (pid %d) no longer runs; its console is in %s", ErrStale, s.QEMUPID, s.Console())
	}
	return nil
}

// namesRun reports whether a /proc/PID/cmdline (arguments ended by NULs)
// holds the kernel command-line parameter by which the lab names a boot's
// run directory, pillar.run=DIR, ended by a space or the argument's end.
func namesRun(cmdline []byte, runDir string) bool {
	p := []byte("pillar.run=" + runDir)
	for _, end := range []string{" ", "\x00"} {
		if bytes.Contains(cmdline, append(p[:len(p):len(p)], end...)) {
			return true
		}
	}
	return false
}

// lockFile takes an exclusive lock on path, failing at once if another
// process holds it. The lock goes with the process, so a killed client
// leaves none behind.
func lockFile(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
