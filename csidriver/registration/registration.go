package registration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/pillar-csi/pillar-csi/csidriver/driver"
	"github.com/pillar-csi/pillar-csi/csidriver/endpoint"
)

// Defaults of Config.
const (
	// DefaultDir is kubelet's plugin registration directory
	// (--root-dir /var/lib/kubelet).
	DefaultDir = "/var/lib/kubelet/plugins_registry"
	// DefaultCheckInterval is how often the socket is checked for still
	// being in place: a lost socket costs at most this long without new
	// CSI calls on the node.
	DefaultCheckInterval = 10 * time.Second
)

// SupportedVersion is the CSI version reported to kubelet: its CSI
// handler needs a highest version of 1.x, and CSI 1.x is backwards
// compatible, so "1.0.0" stands for the 1.13 spec we implement, as it
// does for node-driver-registrar.
const SupportedVersion = "1.0.0"

// maxSocketPath is the longest unix socket path every platform binds and
// dials (sun_path holds 108 bytes with its terminating NUL).
const maxSocketPath = 107

// Timeouts of the socket's own work.
const (
	// stopGrace bounds the wait for kubelet's calls in flight when a
	// socket is closed; they take milliseconds.
	stopGrace = 2 * time.Second
)

// Config configures a Registrar.
type Config struct {
	// Dir is kubelet's plugin registration directory as this process
	// sees it (a hostPath mount of DefaultDir).
	Dir string
	// Endpoint is the CSI socket path as kubelet sees it on the host, e.g.
	// /var/lib/kubelet/plugins/pillar-csi.io/csi.sock: an absolute path
	// without a scheme, which kubelet dials as it is.
	Endpoint string
	// DriverName is the CSI driver name; driver.Name if empty. The socket
	// is <Dir>/<DriverName>-reg.sock.
	DriverName string
	// CheckInterval is how often the socket is checked;
	// DefaultCheckInterval if zero.
	CheckInterval time.Duration
	// Logger; slog.Default() if nil.
	Logger *slog.Logger
}

// Registrar serves kubelet's Registration service on one socket and keeps
// that socket in place. Its methods are safe for concurrent use.
type Registrar struct {
	cfg  Config
	path string
	tmp  string
	log  *slog.Logger

	mu         sync.Mutex
	gen        uint64 // of the socket kubelet answers about
	registered bool   // kubelet's last answer for gen
	refused    string // kubelet's error for gen, when it refused
	serveErr   error  // why no socket is served, nil while one is
}

// New validates c and returns a Registrar; Run serves it.
func New(c Config) (*Registrar, error) {
	if c.DriverName == "" {
		c.DriverName = driver.Name
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.CheckInterval < 0 {
		return nil, fmt.Errorf("registration check interval %v: must be positive", c.CheckInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Dir == "" {
		return nil, errors.New("plugin registration directory is empty")
	}
	if err := validateEndpoint(c.Endpoint); err != nil {
		return nil, err
	}
	dir := filepath.Clean(c.Dir)
	base := c.DriverName + "-reg.sock"
	r := &Registrar{
		cfg:  c,
		path: filepath.Join(dir, base),
		// kubelet ignores names that start with ".": the socket gets its
		// mode under this name and is renamed into place.
		tmp:      filepath.Join(dir, "."+base+".tmp"),
		log:      c.Logger.With("registration_socket", filepath.Join(dir, base)),
		serveErr: errors.New("registration socket not created yet"),
	}
	if len(r.tmp) > maxSocketPath {
		return nil, fmt.Errorf("registration socket %s: longer than %d bytes, the limit of a unix socket path", r.tmp, maxSocketPath)
	}
	return r, nil
}

// validateEndpoint checks the CSI socket path handed to kubelet. Its
// errors name the flag, since this is what an operator gets wrong.
func validateEndpoint(ep string) error {
	switch {
	case ep == "":
		return errors.New("kubelet registration path is empty: set -kubelet-registration-path to the CSI socket as the host sees it, e.g. /var/lib/kubelet/plugins/pillar-csi.io/csi.sock")
	case strings.Contains(ep, "://") || strings.HasPrefix(ep, "unix:"):
		return fmt.Errorf("kubelet registration path %q: want a plain path without a scheme (kubelet dials it as a unix socket path)", ep)
	case !filepath.IsAbs(ep):
		return fmt.Errorf("kubelet registration path %q: want an absolute path on the host", ep)
	case len(ep) > maxSocketPath:
		return fmt.Errorf("kubelet registration path %q: longer than %d bytes, the limit of a unix socket path", ep, maxSocketPath)
	}
	return nil
}

// Path is the registration socket's path.
func (r *Registrar) Path() string { return r.path }

// Registered is nil when kubelet's last NotifyRegistrationStatus on the
// current socket said the plugin is registered, and says why not
// otherwise.
func (r *Registrar) Registered() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.serveErr != nil:
		return fmt.Errorf("no registration socket: %w", r.serveErr)
	case r.refused != "":
		return fmt.Errorf("kubelet did not register the plugin: %s", r.refused)
	case !r.registered:
		return errors.New("not registered with kubelet yet")
	}
	return nil
}

// Serving is nil while the registration socket is in place and served,
// and the reason otherwise, such as a directory in which no socket can be
// created any more (a hostPath whose directory was removed on the host:
// only a container restart mounts it anew).
func (r *Registrar) Serving() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.serveErr != nil {
		return fmt.Errorf("registration socket %s: %w", r.path, r.serveErr)
	}
	return nil
}

// Run creates the socket and serves it until ctx ends, re-creating it
// whenever it is no longer in place, then removes it. It fails only at
// start: when the directory does not exist, or something that is not a
// stale socket holds the path. Start it after the CSI endpoint serves:
// kubelet calls NodeGetInfo as soon as it has the registration.
func (r *Registrar) Run(ctx context.Context) error {
	if fi, err := os.Stat(filepath.Dir(r.path)); err != nil {
		return fmt.Errorf("plugin registration directory: %w (is kubelet's plugins_registry mounted?)", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("plugin registration directory %s is not a directory", filepath.Dir(r.path))
	}
	s, err := r.listen()
	if err != nil {
		r.setServeErr(err)
		return err
	}
	r.log.Info("serving kubelet plugin registration", "endpoint", r.cfg.Endpoint, "driver", r.cfg.DriverName)
	t := time.NewTicker(r.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if s != nil {
				s.close(true)
			}
			r.setServeErr(errors.New("shut down"))
			r.log.Info("registration socket removed")
			return nil
		case <-t.C:
			s = r.check(s)
		}
	}
}

// check keeps the socket in place: it returns s when s is still served at
// the path, and otherwise a new socket (nil when none can be created, to
// be tried again at the next check).
func (r *Registrar) check(s *socket) *socket {
	if s != nil {
		problem := s.problem()
		if problem == "" {
			return s
		}
		r.log.Warn("registration socket lost; re-creating it", "problem", problem)
		s.close(false)
	}
	// The directory may have gone with the socket: re-create it as kubelet
	// does at its start, with kubelet's mode.
	if err := os.MkdirAll(filepath.Dir(r.path), 0o755); err != nil {
		r.failed(fmt.Errorf("re-create plugin registration directory: %w", err))
		return nil
	}
	ns, err := r.listen()
	if err != nil {
		r.failed(err)
		return nil
	}
	r.log.Info("registration socket re-created")
	return ns
}

func (r *Registrar) failed(err error) {
	r.setServeErr(err)
	r.log.Error("cannot serve the registration socket; retrying", "error", err, "retry_in", r.cfg.CheckInterval.String())
}

func (r *Registrar) setServeErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serveErr = err
}

// socket is one incarnation of the registration socket.
type socket struct {
	g    *grpc.Server
	path string
	id   fileID
	done chan error // Serve's result
}

// fileID tells one socket file from another made at the same path.
type fileID struct{ dev, ino uint64 }

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, true
}

// listen creates a new socket at the path: stale socket removed, bound
// under the temporary dot name, mode 0600 (kubelet runs as root), renamed
// into place, so kubelet never sees it half made.
func (r *Registrar) listen() (*socket, error) {
	if err := endpoint.RemoveStaleSocket(r.path); err != nil {
		return nil, err
	}
	if err := endpoint.RemoveStaleSocket(r.tmp); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: r.tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// The file is renamed; its removal is ours to do (close), by inode.
	l.SetUnlinkOnClose(false)
	fail := func(err error) (*socket, error) {
		l.Close()
		os.Remove(r.tmp)
		return nil, err
	}
	if err := os.Chmod(r.tmp, 0o600); err != nil {
		return fail(fmt.Errorf("chmod registration socket: %w", err))
	}
	fi, err := os.Lstat(r.tmp)
	if err != nil {
		return fail(fmt.Errorf("stat registration socket: %w", err))
	}
	id, ok := idOf(fi)
	if !ok {
		return fail(errors.New("stat registration socket: no inode number on this platform"))
	}

	r.mu.Lock()
	r.gen++
	gen := r.gen
	r.registered, r.refused = false, ""
	r.serveErr = nil // before kubelet can see the socket
	r.mu.Unlock()

	g := grpc.NewServer()
	registerapi.RegisterRegistrationServer(g, &service{r: r, gen: gen})
	if err := os.Rename(r.tmp, r.path); err != nil {
		return fail(fmt.Errorf("move registration socket into place: %w", err))
	}
	s := &socket{g: g, path: r.path, id: id, done: make(chan error, 1)}
	go func() { s.done <- g.Serve(l) }()
	return s, nil
}

// problem says why s is no longer the socket kubelet finds at its path,
// or "" when it is.
func (s *socket) problem() string {
	select {
	case err := <-s.done:
		return fmt.Sprintf("serving stopped: %v", err)
	default:
	}
	return s.fileProblem()
}

// fileProblem says why the file at s's path is not s's socket, or "".
func (s *socket) fileProblem() string {
	fi, err := os.Lstat(s.path)
	if err != nil {
		return fmt.Sprintf("socket file gone: %v", err)
	}
	if id, ok := idOf(fi); !ok || id != s.id {
		return "another file is at the socket path"
	}
	return ""
}

// close stops serving; with unlink it also removes the socket file, when
// the file at the path is still this socket (a successor's is left
// alone).
func (s *socket) close(unlink bool) {
	stopped := make(chan struct{})
	go func() { s.g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		s.g.Stop()
	}
	if unlink && s.fileProblem() == "" {
		os.Remove(s.path)
	}
}

// service is the Registration service of one socket incarnation: kubelet's
// answers about an older socket do not count for the current one.
type service struct {
	registerapi.UnimplementedRegistrationServer
	r   *Registrar
	gen uint64
}

// GetInfo tells kubelet what plugin this is and where its CSI socket is.
func (s *service) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	s.r.log.Info("kubelet asked for the plugin info")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.r.cfg.DriverName,
		Endpoint:          s.r.cfg.Endpoint,
		SupportedVersions: []string{SupportedVersion},
	}, nil
}

// NotifyRegistrationStatus records kubelet's verdict. A refusal is logged
// as an error and the socket keeps serving: kubelet retries with backoff
// for as long as the socket exists.
func (s *service) NotifyRegistrationStatus(_ context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	s.r.mu.Lock()
	current := s.gen == s.r.gen
	if current {
		s.r.registered = st.PluginRegistered
		s.r.refused = ""
		if !st.PluginRegistered {
			s.r.refused = st.Error
			if s.r.refused == "" {
				s.r.refused = "no reason given"
			}
		}
	}
	s.r.mu.Unlock()
	switch {
	case !current:
		s.r.log.Info("kubelet answered about a replaced registration socket; ignored", "registered", st.PluginRegistered, "error", st.Error)
	case st.PluginRegistered:
		s.r.log.Info("registered with kubelet", "driver", s.r.cfg.DriverName, "endpoint", s.r.cfg.Endpoint)
	default:
		s.r.log.Error("kubelet did not register the plugin; it retries while the socket exists", "error", st.Error, "endpoint", s.r.cfg.Endpoint)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}
