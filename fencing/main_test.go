package fencing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Some tests need a second process on the same directory. They re-execute
// the test binary with childEnv naming what the child does; TestMain runs
// that instead of the tests.
const (
	childEnv    = "PILLAR_FENCING_TEST_CHILD"
	childDirEnv = "PILLAR_FENCING_TEST_DIR"
)

// Exit codes of the "open" child.
const (
	childOpened = 0
	childLocked = 3
	childFailed = 4
)

func TestMain(m *testing.M) {
	switch mode := os.Getenv(childEnv); mode {
	case "":
		os.Exit(m.Run())
	case "open":
		os.Exit(childOpen(os.Getenv(childDirEnv)))
	case "crash-writer":
		if err := crashWriter(os.Getenv(childDirEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "crash writer:", err)
			os.Exit(childFailed)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", childEnv, mode)
		os.Exit(childFailed)
	}
}

// childOpen tries to open the store in dir for a short while.
func childOpen(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	s, err := Open(ctx, dir, Options{})
	switch {
	case errors.Is(err, ErrLocked):
		return childLocked
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return childFailed
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return childFailed
	}
	return childOpened
}

// child returns a command that re-executes the test binary in mode on dir.
func child(t testing.TB, mode, dir string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

// runOpenChild runs the "open" child on dir and returns its exit code.
func runOpenChild(t *testing.T, dir string) int {
	t.Helper()
	err := child(t, "open", dir).Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}
