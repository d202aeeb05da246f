package commandtest_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
)

func TestFormatParse(t *testing.T) {
	for _, s := range []commandtest.Step{
		{Argv: []string{"lvm", "lvs", "--config", "activation { udev_sync=0 }", "vg0"}, Stdout: "  {\n  }\n"},
		{Argv: []string{"zfs", "destroy", "tank/x"}, ExitCode: 1, Stderr: "cannot destroy 'tank/x': dataset is busy\n"},
		{Argv: []string{"true"}},
		{Argv: []string{"zfs", "program", "-j", "tank", "-"}, Stdin: "return 1\n", Stdout: "{\"return\": 1}\n"},
		// Output that looks like a section marker stays output.
		{Argv: []string{"sh"}, Stdout: "-- not a section\n"},
	} {
		got, err := commandtest.Parse(commandtest.Format("how it was captured\n", s))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("Parse(Format(%+v)) = %+v", s, got)
		}
	}
	if _, err := commandtest.Parse("-- argv --\nx\n-- stdout --\n"); err == nil {
		t.Error("Parse accepted a capture without exit and stderr sections")
	}
}

func TestRunnerAnswers(t *testing.T) {
	r := commandtest.New(t,
		commandtest.Step{Argv: []string{"zfs", "list"}, Stdout: "tank\n"},
		commandtest.Step{Argv: []string{"zfs", "destroy", "x"}, ExitCode: 1, Stderr: "busy\n"},
	)
	out, err := r.Run(context.Background(), "zfs", "list")
	if err != nil || string(out) != "tank\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	_, err = r.Run(context.Background(), "zfs", "destroy", "x")
	var ce *command.Error
	if !errors.As(err, &ce) || ce.ExitCode != 1 || ce.Stderr != "busy\n" {
		t.Fatalf("Run = %v, want a *command.Error with exit 1 and the stderr", err)
	}
	if got := len(r.Calls()); got != 2 {
		t.Fatalf("%d calls recorded, want 2", got)
	}
}

func TestRunnerChecksInput(t *testing.T) {
	r := commandtest.New(t, commandtest.Step{Argv: []string{"zfs", "program", "tank", "-"}, Stdin: "return 1\n", Stdout: "ok\n"})
	out, err := r.RunInput(context.Background(), []byte("return 1\n"), "zfs", "program", "tank", "-")
	if err != nil || string(out) != "ok\n" {
		t.Fatalf("RunInput = %q, %v", out, err)
	}
	// A step with standard input does not match a run without it.
	ft := &fakeT{TB: t}
	r = commandtest.New(ft, commandtest.Step{Argv: []string{"zfs", "program", "tank", "-"}, Stdin: "return 1\n"})
	if _, err := r.Run(context.Background(), "zfs", "program", "tank", "-"); err == nil || ft.errors == 0 {
		t.Fatalf("Run without the step's standard input: err %v, %d test errors; want both", err, ft.errors)
	}
}

// fakeT counts Errorf calls instead of failing the test.
type fakeT struct {
	testing.TB
	errors int
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.errors++ }
func (f *fakeT) Cleanup(func())        {}

func TestWithArgs(t *testing.T) {
	s := commandtest.Step{Argv: []string{"zfs", "create", "-V", "65536", "tank/a"}}
	got := s.WithArgs(map[string]string{"65536": "131072", "tank/a": "tank/b"})
	if want := []string{"zfs", "create", "-V", "131072", "tank/b"}; !reflect.DeepEqual(got.Argv, want) {
		t.Fatalf("WithArgs: %q, want %q", got.Argv, want)
	}
	if s.Argv[3] != "65536" {
		t.Fatal("WithArgs changed the original step")
	}
}
