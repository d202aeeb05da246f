package kept

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/kernelvm"
)

// HostOptions say where the kept cluster lives and how its guest is sized.
type HostOptions struct {
	Lab kernelvm.Config
	// Root is the workspace root (go.work's directory).
	Root     string
	MemoryMB int
	CPUs     int
	// Lifetime is how long the guest may run at most: the keeper stops
	// the cluster ten minutes before, the supervisor kills QEMU at it.
	Lifetime time.Duration
	// Self is the pillar-kept executable: the supervisor and the guest's
	// keeper are it too.
	Self   string
	Stdout io.Writer
}

func (o HostOptions) stateDir() string { return StateDir(o.Lab.CacheDir) }

// keeperMargin is how much sooner than the supervisor's kill the keeper
// stops the cluster by itself, time enough for a clean teardown.
const keeperMargin = 10 * time.Minute

// poll is how often the host looks at the channel and the console.
const poll = 250 * time.Millisecond

// current returns the kept cluster's state, or why there is none to use.
func current(dir string) (State, error) {
	s, err := LoadState(dir)
	if err != nil {
		return s, err
	}
	if err := s.Alive(); err != nil {
		return s, fmt.Errorf("%w (make e2e-down clears its state, make e2e-up starts a new one)", err)
	}
	return s, nil
}

// Up starts a kept cluster: it provisions the lab, starts the supervisor
// detached from this process, and returns once the keeper reports the
// cluster ready, the guest's console copied to Stdout meanwhile. A
// running kept cluster is an error; a stale state is cleared.
func Up(ctx context.Context, o HostOptions) (State, error) {
	dir := o.stateDir()
	lock, err := lockFile(filepath.Join(dir, "up.lock"))
	if err != nil {
		return State{}, fmt.Errorf("another make e2e-up is starting a kept cluster: %w", err)
	}
	defer lock.Close()
	if s, err := LoadState(dir); err == nil {
		if err := s.Alive(); err == nil {
			return s, fmt.Errorf("a kept lab cluster runs already (started %s from %s, QEMU pid %d): use it with make e2e-run, or make e2e-down first",
				s.Started.Format(time.DateTime), s.Root, s.QEMUPID)
		} else {
			fmt.Fprintf(o.Stdout, "pillar-kept: clearing a stale state: %v\n", err)
			if err := RemoveState(dir, s.RunDir); err != nil {
				return s, err
			}
		}
	} else if !errors.Is(err, ErrNoState) {
		return State{}, err
	}
	if _, err := kernelvm.Provision(ctx, o.Lab); err != nil {
		return State{}, err
	}
	// The supervisor and the guest's keeper run a copy of this
	// executable: make e2e-run rebuilds bin/pillar-kept, and the guest
	// reads the pages of the file it runs from the host as it needs them.
	self, err := copyExecutable(o.Self, filepath.Join(dir, fmt.Sprintf("pillar-kept.%d", os.Getpid())))
	if err != nil {
		return State{}, err
	}
	logPath := filepath.Join(dir, "supervisor.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return State{}, fmt.Errorf("start the supervisor: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(self, "serve", "-cache", o.Lab.CacheDir, "-root", o.Root,
		"-m", fmt.Sprint(o.MemoryMB), "-smp", fmt.Sprint(o.CPUs), "-lifetime", o.Lifetime.String())
	if o.Lab.KernelExplicit {
		cmd.Args = append(cmd.Args, "-kernel", o.Lab.KernelABI)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: neither make's end nor a Ctrl-C in this terminal
	// after Up has returned reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return State{}, fmt.Errorf("start the supervisor: %w", err)
	}
	supervisor := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintf(o.Stdout, "pillar-kept: supervisor pid %d (log %s)\n", supervisor, logPath)

	// The supervisor saves the state once QEMU runs.
	var s State
	for {
		var err error
		s, err = LoadState(dir)
		if err == nil && s.SupervisorPID == supervisor {
			break
		}
		select {
		case err := <-exited:
			return s, fmt.Errorf("the supervisor ended before QEMU started (%v): %s", err, cluster.TailFile(logPath, 4<<10))
		case <-ctx.Done():
			syscall.Kill(supervisor, syscall.SIGTERM)
			return s, ctx.Err()
		case <-time.After(poll):
		}
	}
	ch := s.Channel()
	con := &follower{path: s.Console(), w: o.Stdout}
	for {
		con.copyNew()
		if exists(ch.path(readyFile)) {
			return s, nil
		}
		if b, err := os.ReadFile(ch.path(failedFile)); err == nil {
			con.copyNew()
			return s, fmt.Errorf("the kept cluster did not start: %s", strings.TrimSpace(string(b)))
		}
		if err := s.Alive(); err != nil {
			con.copyNew()
			return s, fmt.Errorf("the guest ended before the cluster was ready: %w", err)
		}
		select {
		case <-ctx.Done():
			// An interrupted start leaves nothing behind.
			syscall.Kill(-s.QEMUPID, syscall.SIGKILL)
			return s, fmt.Errorf("interrupted: QEMU killed: %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}

// Supervise is the supervisor: it boots the guest with the keeper as its
// command and waits for it to power off, or kills it at o.Lifetime. It
// saves the state once QEMU runs and removes it once QEMU is gone.
func Supervise(ctx context.Context, o HostOptions) error {
	lab, err := kernelvm.Provision(ctx, o.Lab)
	if err != nil {
		return err
	}
	run, err := lab.NewRun()
	if err != nil {
		return err
	}
	s := State{
		SupervisorPID: os.Getpid(), RunDir: run.Dir, Root: o.Root,
		Started: time.Now(), Deadline: time.Now().Add(o.Lifetime), MemoryMB: o.MemoryMB,
	}
	ch := s.Channel()
	// The keeper runs as root in the guest, but the host's client may
	// not: anyone may write requests.
	if err := os.Mkdir(ch.Dir, 0o777); err != nil {
		return fmt.Errorf("create the channel: %w", err)
	}
	os.Chmod(ch.Dir, 0o777)
	life := o.Lifetime - keeperMargin
	if life < time.Minute {
		life = o.Lifetime / 2
	}
	script := kernelvm.CommandScript(o.Root, []string{o.Self, "guest", "-channel", ch.Dir, "-root", o.Root, "-lifetime", life.String()})
	var saveErr error
	res, err := run.Boot(ctx, kernelvm.BootOptions{
		VM:     kernelvm.VMConfig{MemoryMB: o.MemoryMB, CPUs: o.CPUs, Timeout: o.Lifetime},
		Script: script,
		Stdout: io.Discard, // console.log in the run directory has it
		OnStart: func(pid int) {
			s.QEMUPID = pid
			saveErr = s.Save(StateDir(o.Lab.CacheDir))
			fmt.Fprintf(o.Stdout, "pillar-kept: QEMU pid %d, run directory %s\n", pid, run.Dir)
		},
	})
	// Up made the executable this process and the keeper ran for them.
	if filepath.Dir(o.Self) == StateDir(o.Lab.CacheDir) {
		os.Remove(o.Self)
	}
	if rerr := RemoveState(StateDir(o.Lab.CacheDir), run.Dir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if saveErr != nil {
		err = errors.Join(err, saveErr)
	}
	if err != nil {
		return fmt.Errorf("the kept guest (run directory %s kept): %w", run.Dir, err)
	}
	fmt.Fprintf(o.Stdout, "pillar-kept: the guest powered off after %.1fs, keeper's exit status %d\n", res.Elapsed.Seconds(), res.ExitStatus)
	if res.ExitStatus != 0 {
		return fmt.Errorf("the keeper failed (exit status %d): run directory %s kept", res.ExitStatus, run.Dir)
	}
	return run.Remove()
}

// RunOptions say which test package make e2e-run runs in the kept cluster.
type RunOptions struct {
	// ModuleDir is the test package's module (tests/), ImportPath the
	// package and Dir its directory, where the binary runs.
	ModuleDir, ImportPath, Dir string
	// Args are the binary's flags (-test.run, ...), after -test.v.
	Args   []string
	Stderr io.Writer
}

// RunTest compiles the test package on the host, has the keeper run it
// against the kept cluster, copies its output to Stdout as it comes, and
// returns its exit status. Ctrl-C (ctx) stops the binary in the guest.
func RunTest(ctx context.Context, o HostOptions, r RunOptions) (int, error) {
	dir := o.stateDir()
	s, err := current(dir)
	if err != nil {
		return 0, err
	}
	if s.Root != o.Root {
		return 0, fmt.Errorf("the kept lab cluster was started from %s, not %s: its guest runs that tree's binaries and images", s.Root, o.Root)
	}
	ch := s.Channel()
	if !exists(ch.path(readyFile)) {
		if b, err := os.ReadFile(ch.path(failedFile)); err == nil {
			return 0, fmt.Errorf("the kept cluster failed to start: %s", strings.TrimSpace(string(b)))
		}
		return 0, errors.New("the kept lab cluster is still starting (make e2e-up returns once it is ready)")
	}
	lock, err := lockFile(filepath.Join(dir, "run.lock"))
	if err != nil {
		return 0, fmt.Errorf("another make e2e-run is using the kept cluster: %w", err)
	}
	defer lock.Close()

	id := fmt.Sprintf("%s-%d", time.Now().Format("20060102-150405"), os.Getpid())
	bin := ch.RequestBinary(id)
	defer os.Remove(bin)
	t0 := time.Now()
	fmt.Fprintf(r.Stderr, "pillar-kept: go test -c -tags %s %s\n", kernelvm.KernelTag, r.ImportPath)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	build := exec.CommandContext(cctx, "go", "test", "-c", "-tags", kernelvm.KernelTag, "-o", bin, r.ImportPath)
	build.Dir = r.ModuleDir
	build.Env = append(os.Environ(), "GOWORK=off")
	build.Stdout, build.Stderr = r.Stderr, r.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("compile %s: %w", r.ImportPath, err)
	}
	fmt.Fprintf(r.Stderr, "pillar-kept: compiled in %.1fs; running it in the kept guest\n", time.Since(t0).Seconds())
	req := Request{ID: id, Binary: bin, Dir: r.Dir, Args: append([]string{"-test.v", "-test.timeout=60m"}, r.Args...)}
	if err := ch.Submit(req); err != nil {
		return 0, err
	}
	st, err := ch.Follow(ctx, id, o.Stdout, poll, s.Alive)
	if ctx.Err() != nil {
		fmt.Fprintf(r.Stderr, "pillar-kept: interrupted: stopping the test binary in the guest\n")
		if err := ch.Cancel(id); err != nil {
			return 0, err
		}
		wctx, wcancel := context.WithTimeout(context.Background(), cancelGrace+time.Minute)
		defer wcancel()
		st, err = ch.Follow(wctx, id, o.Stdout, poll, s.Alive)
	}
	if err != nil {
		return 0, err
	}
	if st.Error != "" {
		fmt.Fprintf(r.Stderr, "pillar-kept: %s\n", st.Error)
	}
	fmt.Fprintf(r.Stderr, "pillar-kept: exit status %d; %.1fs in the guest, %.1fs in all\n", st.ExitStatus, st.Seconds, time.Since(t0).Seconds())
	return st.ExitStatus, nil
}

// Down asks the keeper to tear the cluster down and waits for the guest
// to power off, the console copied to Stdout; after timeout it kills
// QEMU. No kept cluster is no error; a stale state is cleared.
func Down(ctx context.Context, o HostOptions, timeout time.Duration) error {
	dir := o.stateDir()
	s, err := LoadState(dir)
	if errors.Is(err, ErrNoState) {
		fmt.Fprintf(o.Stdout, "pillar-kept: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.Alive(); err != nil {
		fmt.Fprintf(o.Stdout, "pillar-kept: clearing a stale state: %v\n", err)
		return RemoveState(dir, s.RunDir)
	}
	con := &follower{path: s.Console(), w: o.Stdout}
	con.skipToEnd()
	if err := os.WriteFile(s.Channel().path(downFile), []byte("down\n"), 0o644); err != nil {
		return fmt.Errorf("ask the keeper to stop: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for s.Alive() == nil {
		con.copyNew()
		if time.Now().After(deadline) || ctx.Err() != nil {
			fmt.Fprintf(o.Stdout, "pillar-kept: the guest did not power off in %v: killing QEMU (pid %d)\n", timeout, s.QEMUPID)
			// QEMU leads its own process group (kernelvm's Boot).
			syscall.Kill(-s.QEMUPID, syscall.SIGKILL)
			time.Sleep(2 * time.Second)
			break
		}
		time.Sleep(poll)
	}
	con.copyNew()
	// The supervisor removes the state once Boot returns.
	for i := 0; i < 40; i++ {
		if _, err := LoadState(dir); errors.Is(err, ErrNoState) {
			return nil
		}
		time.Sleep(poll)
	}
	return RemoveState(dir, s.RunDir)
}

// follower copies what is appended to a file.
type follower struct {
	path string
	w    io.Writer
	off  int64
}

func (f *follower) copyNew() {
	file, err := os.Open(f.path)
	if err != nil {
		return
	}
	defer file.Close()
	if _, err := file.Seek(f.off, io.SeekStart); err != nil {
		return
	}
	n, _ := io.Copy(f.w, file)
	f.off += n
}

func (f *follower) skipToEnd() {
	if fi, err := os.Stat(f.path); err == nil {
		f.off = fi.Size()
	}
}

// copyExecutable copies the executable src to dst.
func copyExecutable(src, dst string) (string, error) {
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	return dst, nil
}
