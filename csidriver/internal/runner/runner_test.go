package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRunReturnsStdout(t *testing.T) {
	out, err := Exec{}.Run(context.Background(), "sh", "-c", "echo hello; echo noise >&2")
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
}

func TestRunErrorCarriesExitCodeAndStderr(t *testing.T) {
	_, err := Exec{}.Run(context.Background(), "sh", "-c", "echo broken >&2; exit 3")
	code, ok := ExitCode(err)
	if !ok || code != 3 {
		t.Fatalf("ExitCode(%v) = %d, %v; want 3", err, code, ok)
	}
	if !strings.Contains(err.Error(), "broken") || !strings.Contains(err.Error(), "sh -c") {
		t.Errorf("error %q lacks stderr or command", err)
	}
}

func TestRunKillsProcessGroupOnTimeout(t *testing.T) {
	start := time.Now()
	// The grandchild keeps stdout open; without the group kill Run would
	// wait for it.
	_, err := Exec{Timeout: 200 * time.Millisecond}.Run(context.Background(), "sh", "-c", "sleep 30 & sleep 30")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if _, ok := ExitCode(err); ok {
		t.Errorf("a killed command has no exit code: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Run returned after %v", d)
	}
}

func TestRunMissingCommand(t *testing.T) {
	_, err := Exec{}.Run(context.Background(), "/nonexistent/mkfs")
	var e *Error
	if !errors.As(err, &e) || e.ExitCode != -1 {
		t.Fatalf("err = %#v", err)
	}
}
