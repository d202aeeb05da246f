// Package commandtest provides a command.Runner for unit tests: it checks every
// command line against a script and answers with recorded output, usually
// output captured from the real tools in the kernel lab.
//
// A capture is a text file: free text (how and where it was captured),
// then the sections "-- argv --" (one argument per line), "-- stdin --"
// (only for a command given standard input), "-- exit --", "-- stdout --"
// and "-- stderr --". The kernel suites of the tests module
// write them (tests/kernel/backends, flag -backends.capture).
package commandtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// Step is one expected command and its answer.
type Step struct {
	Argv     []string // name and arguments
	Stdin    string   // standard input; "" for none
	ExitCode int
	Stdout   string
	Stderr   string
	Source   string // the capture file, for messages
}

// WithArgs returns a copy of s in which every argument equal to a key of
// args is replaced by its value: a captured command, for another volume
// or size.
func (s Step) WithArgs(args map[string]string) Step {
	s.Argv = slices.Clone(s.Argv)
	for i, a := range s.Argv {
		if v, ok := args[a]; ok {
			s.Argv[i] = v
		}
	}
	return s
}

// Runner replays its steps in order. Any other command fails the test.
type Runner struct {
	t     testing.TB
	mu    sync.Mutex
	steps []Step
	calls [][]string
}

// New returns a Runner expecting steps, in order. At the end of the test it
// fails the test if a step was not run.
func New(t testing.TB, steps ...Step) *Runner {
	t.Helper()
	r := &Runner{t: t, steps: steps}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range r.steps {
			t.Errorf("expected command not run: %s (%s)", strings.Join(s.Argv, " "), s.Source)
		}
	})
	return r
}

// Replay returns a Runner expecting the captures PREFIX.1.txt,
// PREFIX.2.txt, ... in that order.
func Replay(t testing.TB, prefix string) *Runner {
	t.Helper()
	return New(t, Captures(t, prefix)...)
}

// Captures loads PREFIX.1.txt, PREFIX.2.txt, ... up to the first missing
// number. It fails the test if there is none.
func Captures(t testing.TB, prefix string) []Step {
	t.Helper()
	var steps []Step
	for i := 1; ; i++ {
		path := prefix + "." + strconv.Itoa(i) + ".txt"
		if _, err := os.Stat(path); os.IsNotExist(err) {
			break
		}
		steps = append(steps, Load(t, path))
	}
	if len(steps) == 0 {
		t.Fatalf("commandtest: no captures %s.N.txt", prefix)
	}
	return steps
}

// Load reads one capture file.
func Load(t testing.TB, path string) Step {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("commandtest: %v", err)
	}
	s, err := Parse(string(b))
	if err != nil {
		t.Fatalf("commandtest: %s: %v", path, err)
	}
	s.Source = filepath.ToSlash(path)
	return s
}

// Parse reads the text of a capture.
func Parse(text string) (Step, error) {
	sections := map[string]string{}
	var cur string
	var seen []string
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSuffix(line, "\n")
		if name, ok := strings.CutPrefix(trimmed, "-- "); ok && strings.HasSuffix(name, " --") {
			cur = strings.TrimSuffix(name, " --")
			seen = append(seen, cur)
			continue
		}
		if cur != "" {
			sections[cur] += line
		}
	}
	if want, withStdin := []string{"argv", "exit", "stdout", "stderr"}, []string{"argv", "stdin", "exit", "stdout", "stderr"}; !slices.Equal(seen, want) && !slices.Equal(seen, withStdin) {
		return Step{}, fmt.Errorf("sections %q, want %q or %q", seen, want, withStdin)
	}
	code, err := strconv.Atoi(strings.TrimSpace(sections["exit"]))
	if err != nil {
		return Step{}, fmt.Errorf("exit status: %w", err)
	}
	return Step{
		Argv:     strings.Split(strings.TrimSuffix(sections["argv"], "\n"), "\n"),
		Stdin:    sections["stdin"],
		ExitCode: code,
		Stdout:   sections["stdout"],
		Stderr:   sections["stderr"],
	}, nil
}

// Format renders a capture; Parse(Format(...)) returns the step. Output
// without a final newline gets one, which the tools' parsers ignore.
func Format(comment string, s Step) string {
	var b strings.Builder
	b.WriteString(comment)
	if comment != "" && !strings.HasSuffix(comment, "\n") {
		b.WriteByte('\n')
	}
	section := func(name, body string) {
		b.WriteString("-- " + name + " --\n" + body)
		if body != "" && !strings.HasSuffix(body, "\n") {
			b.WriteByte('\n')
		}
	}
	section("argv", strings.Join(s.Argv, "\n"))
	if s.Stdin != "" {
		section("stdin", s.Stdin)
	}
	section("exit", strconv.Itoa(s.ExitCode))
	section("stdout", s.Stdout)
	section("stderr", s.Stderr)
	return b.String()
}

// Run implements command.Runner.
func (r *Runner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	r.t.Helper()
	return r.RunInput(ctx, nil, name, args...)
}

// RunInput implements command.InputRunner: the input must be the step's
// standard input.
func (r *Runner) RunInput(ctx context.Context, input []byte, name string, args ...string) ([]byte, error) {
	r.t.Helper()
	argv := append([]string{name}, args...)
	r.mu.Lock()
	r.calls = append(r.calls, argv)
	if len(r.steps) == 0 {
		r.mu.Unlock()
		r.t.Errorf("unexpected command: %s", strings.Join(argv, " "))
		return nil, fmt.Errorf("commandtest: unexpected command %q", argv)
	}
	s := r.steps[0]
	r.steps = r.steps[1:]
	r.mu.Unlock()
	if !slices.Equal(argv, s.Argv) {
		r.t.Errorf("command\n\t%q\nwant (%s)\n\t%q", argv, s.Source, s.Argv)
		return nil, fmt.Errorf("commandtest: unexpected command %q", argv)
	}
	if string(input) != s.Stdin {
		r.t.Errorf("command %q: standard input\n%s\nwant (%s)\n%s", argv, input, s.Source, s.Stdin)
		return nil, fmt.Errorf("commandtest: unexpected standard input for %q", argv)
	}
	if err := ctx.Err(); err != nil {
		return nil, &command.Error{Cmd: argv, ExitCode: -1, Err: err}
	}
	if s.ExitCode != 0 {
		return []byte(s.Stdout), Exited(argv, s.ExitCode, s.Stderr)
	}
	return []byte(s.Stdout), nil
}

// Calls returns the command lines run so far.
func (r *Runner) Calls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Func is a runner that answers every command with itself: for tests whose
// commands run side by side, in no fixed order. argv is the name and the
// arguments.
type Func func(ctx context.Context, argv []string) ([]byte, error)

// Run implements command.Runner.
func (f Func) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return f(ctx, append([]string{name}, args...))
}

// RunInput implements command.InputRunner; the input is not looked at.
func (f Func) RunInput(ctx context.Context, _ []byte, name string, args ...string) ([]byte, error) {
	return f(ctx, append([]string{name}, args...))
}

// Exited is the error of a command argv that exited with status code and
// wrote stderr, as command.Exec returns it.
func Exited(argv []string, code int, stderr string) error {
	return &command.Error{Cmd: argv, ExitCode: code, Stderr: stderr, Err: fmt.Errorf("exit status %d", code)}
}

// Killed is the error of a command argv that was killed before it exited
// (its context ended), as command.Exec returns it.
func Killed(argv []string) error {
	return &command.Error{Cmd: argv, ExitCode: -1, Err: errors.Join(errors.New("signal: killed"), context.Canceled)}
}
