package nvmeof

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// Error is a failed initiator operation.
type Error struct {
	Op   string // "connect", "disconnect", "find namespace", ...
	Path string // the sysfs or /dev file involved, or the subsystem NQN
	Err  error
}

func (e *Error) Error() string { return "nvmeof " + e.Op + " " + e.Path + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ErrNamespaceNotFound is wrapped when no block device carries a
// namespace's identifiers (in time).
var ErrNamespaceNotFound = errors.New("namespace not found")

// Paths are the kernel interfaces the Initiator uses.
type Paths struct {
	Sys     string // sysfs mount, "/sys"
	Dev     string // devtmpfs, "/dev"
	Fabrics string // "/dev/nvme-fabrics"
}

// DefaultPaths are the real kernel's.
var DefaultPaths = Paths{Sys: "/sys", Dev: "/dev", Fabrics: "/dev/nvme-fabrics"}

// Initiator is the kernel NVMe-oF initiator of this host.
type Initiator struct {
	paths Paths
	k     Kernel
	poll  time.Duration
}

// Kernel is the initiator's write side: the two operations a fixture tree
// cannot answer like the kernel does.
type Kernel struct {
	// Connect writes options to /dev/nvme-fabrics and returns the answer
	// read back ("instance=N,cntlid=M").
	Connect func(ctx context.Context, options string) (string, error)
	// WriteAttr writes one sysfs attribute (delete_controller,
	// rescan_controller).
	WriteAttr func(path, value string) error
}

// New returns an Initiator working on p.
func New(p Paths) *Initiator {
	in := &Initiator{paths: p, poll: 20 * time.Millisecond}
	in.k = Kernel{Connect: in.writeFabrics, WriteAttr: writeAttr}
	return in
}

// NewFake returns an Initiator that reads p like New but performs its
// writes through k. Unit tests use it with a fixture sysfs tree.
func NewFake(p Paths, k Kernel) *Initiator {
	return &Initiator{paths: p, k: k, poll: 2 * time.Millisecond}
}

// Paths returns the interfaces the Initiator works on.
func (in *Initiator) Paths() Paths { return in.paths }

// Target is where a volume's subsystem is exported.
type Target struct {
	Transport string // "tcp"
	Address   netip.Addr
	Port      uint16
	NQN       string
}

// Host identifies this initiator to targets.
type Host struct {
	NQN string // hostnqn
	ID  string // hostid, a UUID
}

// Controller is /sys/class/nvme/<Name>.
type Controller struct {
	Name      string // nvmeN
	SubsysNQN string // subsysnqn
	Transport string // transport
	Address   map[string]string
	State     string // state: live, connecting, resetting, deleting, ...
	HostNQN   string // hostnqn
}

// matches reports whether c is a controller of t (any state but deleting).
func (c Controller) matches(t Target) bool {
	if c.SubsysNQN != t.NQN || c.Transport != t.Transport || strings.HasPrefix(c.State, "deleting") || c.State == "dead" {
		return false
	}
	a, err := netip.ParseAddr(c.Address["traddr"])
	return err == nil && a == t.Address && c.Address["trsvcid"] == strconv.Itoa(int(t.Port))
}

// OptionString renders the /dev/nvme-fabrics connect options.
func OptionString(t Target, h Host, o export.ConnectOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "transport=%s,traddr=%s,trsvcid=%d,nqn=%s", t.Transport, t.Address, t.Port, t.NQN)
	if h.NQN != "" {
		b.WriteString(",hostnqn=" + h.NQN)
	}
	if h.ID != "" {
		b.WriteString(",hostid=" + h.ID)
	}
	for _, kv := range []struct {
		k string
		v *int32
	}{
		{"ctrl_loss_tmo", o.CtrlLossTimeoutSeconds},
		{"reconnect_delay", o.ReconnectDelaySeconds},
		{"keep_alive_tmo", o.KeepAliveTimeoutSeconds},
		{"nr_io_queues", o.NrIOQueues},
		{"queue_size", o.QueueSize},
	} {
		if kv.v != nil {
			fmt.Fprintf(&b, ",%s=%d", kv.k, *kv.v)
		}
	}
	return b.String()
}

// Connect connects to t unless a controller of t already exists, and
// returns the controller's name and whether it was reused.
func (in *Initiator) Connect(ctx context.Context, t Target, h Host, o export.ConnectOptions) (name string, reused bool, err error) {
	if c, ok, err := in.find(t); err != nil || ok {
		return c.Name, ok, err
	}
	opts := OptionString(t, h, o)
	answer, err := in.k.Connect(ctx, opts)
	if errors.Is(err, syscall.EALREADY) {
		// Another connect of the same host to the same subsystem and
		// address won the race; use its controller.
		if c, ok, ferr := in.find(t); ferr == nil && ok {
			return c.Name, true, nil
		}
	}
	if err != nil {
		// The options without this host's NQN and ID: the error reaches
		// the pod's events (kubelet's FailedMount), which tenants read.
		return "", false, &Error{Op: "connect", Path: in.paths.Fabrics, Err: fmt.Errorf("%s: %w", OptionString(t, Host{}, o), err)}
	}
	var inst, cntlid int
	if _, err := fmt.Sscanf(strings.TrimSpace(answer), "instance=%d,cntlid=%d", &inst, &cntlid); err != nil {
		return "", false, &Error{Op: "connect", Path: in.paths.Fabrics, Err: fmt.Errorf("unexpected answer %q: %w", answer, err)}
	}
	if inst < 0 {
		return "", false, &Error{Op: "connect", Path: in.paths.Fabrics, Err: fmt.Errorf("unexpected answer %q: negative instance", answer)}
	}
	return "nvme" + strconv.Itoa(inst), false, nil
}

// writeFabrics is the kernel's connect: one write of the options, then a
// read of the same open file for the new controller's instance.
func (in *Initiator) writeFabrics(ctx context.Context, options string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	f, err := os.OpenFile(in.paths.Fabrics, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// The write blocks until the controller is connected or the kernel
	// gives up (connect timeouts are the kernel's, a few seconds per
	// attempt); it cannot be interrupted from here.
	if _, err := f.Write([]byte(options)); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	n, err := f.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func (in *Initiator) classDir() string { return filepath.Join(in.paths.Sys, "class", "nvme") }

// Controllers lists every NVMe controller with subsystem NQN nqn.
func (in *Initiator) Controllers(nqn string) ([]Controller, error) {
	ents, err := os.ReadDir(in.classDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // no nvme driver loaded yet: no controllers
	}
	if err != nil {
		return nil, &Error{Op: "list controllers", Path: in.classDir(), Err: err}
	}
	var out []Controller
	for _, e := range ents {
		c, err := in.readController(e.Name())
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted while we looked
		}
		if err != nil {
			return nil, err
		}
		if c.SubsysNQN == nqn {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (in *Initiator) readController(name string) (Controller, error) {
	dir := filepath.Join(in.classDir(), name)
	read := func(attr string, optional bool) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, attr))
		if err != nil {
			if optional && errors.Is(err, os.ErrNotExist) {
				if _, serr := os.Stat(dir); serr == nil {
					return "", nil
				}
			}
			return "", &Error{Op: "read controller", Path: filepath.Join(dir, attr), Err: err}
		}
		return strings.TrimSpace(string(b)), nil
	}
	c := Controller{Name: name, Address: map[string]string{}}
	var err error
	if c.SubsysNQN, err = read("subsysnqn", false); err != nil {
		return c, err
	}
	// PCIe controllers have no address; fabrics ones always do.
	if c.Transport, err = read("transport", true); err != nil {
		return c, err
	}
	if c.State, err = read("state", true); err != nil {
		return c, err
	}
	if c.HostNQN, err = read("hostnqn", true); err != nil {
		return c, err
	}
	addr, err := read("address", true)
	if err != nil {
		return c, err
	}
	for _, kv := range strings.Split(addr, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			c.Address[k] = v
		}
	}
	return c, nil
}

func (in *Initiator) find(t Target) (Controller, bool, error) {
	cs, err := in.Controllers(t.NQN)
	if err != nil {
		return Controller{}, false, err
	}
	for _, c := range cs {
		if c.matches(t) {
			return c, true, nil
		}
	}
	return Controller{}, false, nil
}

// headNodeRE matches namespace block devices that have a /dev node:
// nvmeXnY, not the per-path nvmeXcYnZ of native multipath.
var headNodeRE = regexp.MustCompile(`^nvme[0-9]+n[0-9]+$`)

// FindNamespace returns the block device name (nvmeXnY) whose uuid equals
// id.UUID or whose nguid equals id.NGUID; ok is false when none does.
func (in *Initiator) FindNamespace(id export.Identity) (name string, ok bool, err error) {
	dir := filepath.Join(in.paths.Sys, "block")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", false, &Error{Op: "find namespace", Path: dir, Err: err}
	}
	var found []string
	for _, e := range ents {
		if !headNodeRE.MatchString(e.Name()) {
			continue
		}
		for _, attr := range []struct{ file, want string }{{"uuid", id.UUID}, {"nguid", id.NGUID}} {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), attr.file))
			if err != nil {
				continue // attribute hidden (identifier unset) or device going away
			}
			if strings.EqualFold(strings.TrimSpace(string(b)), attr.want) {
				found = append(found, e.Name())
				break
			}
		}
	}
	switch len(found) {
	case 0:
		return "", false, nil
	case 1:
		return found[0], true, nil
	default:
		// Two head nodes with one identity: a second subsystem exports the
		// same volume (a misconfiguration); guessing could mount the wrong
		// one.
		return "", false, &Error{Op: "find namespace", Path: dir,
			Err: fmt.Errorf("volume %s: several block devices %v carry uuid %s / nguid %s", id.VolumeID, found, id.UUID, id.NGUID)}
	}
}

// WaitNamespace polls FindNamespace until the device appears or ctx ends.
// The kernel adds a new controller's namespaces within milliseconds of
// the connect: it looks again after 1 ms, then twice as long each time, up
// to the Initiator's poll interval.
func (in *Initiator) WaitNamespace(ctx context.Context, id export.Identity) (string, error) {
	for wait := min(time.Millisecond, in.poll); ; wait = min(2*wait, in.poll) {
		name, ok, err := in.FindNamespace(id)
		if err != nil {
			return "", err
		}
		if ok {
			if _, err := os.Stat(in.DevicePath(name)); err == nil {
				return name, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", &Error{Op: "wait for namespace", Path: id.SubsystemNQN,
				Err: fmt.Errorf("%w: no block device with uuid %s or nguid %s: %w", ErrNamespaceNotFound, id.UUID, id.NGUID, ctx.Err())}
		case <-time.After(wait):
		}
	}
}

// DevicePath is the /dev node of a block device name.
func (in *Initiator) DevicePath(name string) string { return filepath.Join(in.paths.Dev, name) }

// DeviceSize returns the size in bytes of a block device, from sysfs
// (the size attribute counts 512-byte sectors whatever the block size).
func (in *Initiator) DeviceSize(name string) (int64, error) {
	p := filepath.Join(in.paths.Sys, "block", name, "size")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, &Error{Op: "device size", Path: p, Err: err}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, &Error{Op: "device size", Path: p, Err: err}
	}
	// The kernel prints an unsigned sector count; in bytes it must fit an
	// int64, or the size would wrap negative.
	if n < 0 || n > math.MaxInt64/512 {
		return 0, &Error{Op: "device size", Path: p, Err: fmt.Errorf("%d sectors out of range", n)}
	}
	return n * 512, nil
}

// Disconnect deletes every controller of subsystem nqn and waits until
// they are gone. Controllers of other subsystems are never touched.
func (in *Initiator) Disconnect(ctx context.Context, nqn string) error {
	cs, err := in.Controllers(nqn)
	if err != nil {
		return err
	}
	for _, c := range cs {
		p := filepath.Join(in.classDir(), c.Name, "delete_controller")
		if err := in.k.WriteAttr(p, "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return &Error{Op: "disconnect", Path: p, Err: err}
		}
	}
	for {
		cs, err := in.Controllers(nqn)
		if err != nil {
			return err
		}
		if len(cs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			names := make([]string, len(cs))
			for i, c := range cs {
				names[i] = c.Name + " (" + c.State + ")"
			}
			return &Error{Op: "disconnect", Path: nqn, Err: fmt.Errorf("controllers %v still present: %w", names, ctx.Err())}
		case <-time.After(in.poll):
		}
	}
}

// Rescan asks every live controller of nqn to rescan its namespaces, so a
// grown namespace shows its new size even if the target's asynchronous
// event notice was missed.
func (in *Initiator) Rescan(nqn string) error {
	cs, err := in.Controllers(nqn)
	if err != nil {
		return err
	}
	for _, c := range cs {
		if c.State != "live" {
			continue
		}
		p := filepath.Join(in.classDir(), c.Name, "rescan_controller")
		if err := in.k.WriteAttr(p, "1"); err != nil {
			return &Error{Op: "rescan", Path: p, Err: err}
		}
	}
	return nil
}

// writeAttr writes a sysfs attribute with one write(2), without O_CREAT
// or O_TRUNC (sysfs files exist or the object is gone).
func writeAttr(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte(value))
	cerr := f.Close()
	return errors.Join(werr, cerr)
}
