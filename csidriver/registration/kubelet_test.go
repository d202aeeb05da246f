package registration_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// kubelet does, for the tests, what kubelet's plugin watcher and CSI
// handler do with a registration directory: follow it with fsnotify,
// ignore dot names and files that are not sockets, dial a new socket by
// its plain path, call GetInfo and NotifyRegistrationStatus with
// kubelet's deadlines, and check the versions as the CSI handler does.
type kubelet struct {
	t      *testing.T
	w      *fsnotify.Watcher
	events chan fsnotify.Event
}

// startKubelet watches dir, as a running kubelet does.
func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	k := &kubelet{t: t, w: w, events: make(chan fsnotify.Event, 100)}
	go func() {
		for {
			select {
			case e, ok := <-w.Events:
				if !ok {
					close(k.events)
					return
				}
				if strings.HasPrefix(filepath.Base(e.Name), ".") {
					continue // kubelet ignores these
				}
				k.events <- e
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { w.Close() })
	return k
}

// waitEvent waits for an event of op on path; other events are dropped.
func (k *kubelet) waitEvent(path string, op fsnotify.Op) {
	k.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-k.events:
			if !ok {
				k.t.Fatalf("watcher closed while waiting for %v on %s", op, path)
			}
			if e.Name == path && e.Has(op) {
				if op == fsnotify.Create && !isSocket(path) {
					continue // kubelet ignores files that are not sockets
				}
				return
			}
		case <-deadline:
			k.t.Fatalf("no %v event on %s within 10s", op, path)
		}
	}
}

func isSocket(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// dial connects to a socket the way kubelet does: the plain path, over a
// unix dialer.
func dial(t *testing.T, path string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///kubelet-plugin",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// getInfo is kubelet's GetInfo call (1 s deadline) and the CSI handler's
// validation of its answer.
func getInfo(t *testing.T, sock string) *registerapi.PluginInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := registerapi.NewRegistrationClient(dial(t, sock)).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo on %s: %v", sock, err)
	}
	if info.Type != registerapi.CSIPlugin {
		t.Errorf("type %q, want %q", info.Type, registerapi.CSIPlugin)
	}
	v, err := utilversion.HighestSupportedVersion(info.SupportedVersions)
	if err != nil || v.Major() != 1 {
		t.Errorf("versions %v: highest %v, %v; kubelet's CSI handler wants 1.x", info.SupportedVersions, v, err)
	}
	return info
}

// notify is kubelet's NotifyRegistrationStatus call (5 s deadline).
func notify(t *testing.T, sock string, registered bool, reason string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := registerapi.NewRegistrationClient(dial(t, sock)).NotifyRegistrationStatus(ctx,
		&registerapi.RegistrationStatus{PluginRegistered: registered, Error: reason}); err != nil {
		t.Fatalf("NotifyRegistrationStatus on %s: %v", sock, err)
	}
}

// scan is kubelet's walk of the directory at its start: the sockets it
// would register.
func scan(t *testing.T, dir string) []string {
	t.Helper()
	var socks []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir && !strings.HasPrefix(fi.Name(), ".") && fi.Mode()&os.ModeSocket != 0 {
			socks = append(socks, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return socks
}
