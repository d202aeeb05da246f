package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// A two-guest run boots a second guest next to the one that runs the
// tests: the peer, which in the end-to-end suite is the storage node. The
// two are joined by a virtual Ethernet link (eth0 in both) and share one
// uncached 9p directory, their only channel besides the link: the main
// guest hands the peer what it needs to join the cluster there, and asks
// the host, which owns both QEMU processes, to cut the peer's power.
const (
	// RoleParam is the kernel command-line parameter naming a guest's
	// part in a two-guest run: RoleMain or RolePeer. A one-guest run has
	// none.
	RoleParam = "pillar.role"
	RoleMain  = "main"
	RolePeer  = "peer"

	// ShareDir is where both guests of a two-guest run mount the shared
	// directory (9p without caching, so that each side sees the other's
	// writes at once).
	ShareDir = "/run/pillar-lab/share"

	// MainAddr and PeerAddr are the guests' addresses on their link, in
	// LinkCIDR. They exist only inside the guests: the link's only
	// presence on the host is a QEMU tunnel on 127.0.0.1.
	MainAddr = "10.99.0.1"
	PeerAddr = "10.99.0.2"
	LinkCIDR = "10.99.0.0/24"
	// LinkInterface is the link's network interface in both guests.
	LinkInterface = "eth0"
)

// Role returns this guest's part in a two-guest run, or "" in a one-guest
// run.
func Role() string {
	r, _ := Param(RoleParam)
	return r
}

// The power-cut handshake: the main guest writes powerCutFile(n) into the
// share; the host kills the peer's QEMU (no shutdown, no sync: a power
// cut), writes powerCutFile(n)+".done" and boots the peer again from the
// same disks.
func powerCutFile(n int) string { return fmt.Sprintf("power-cut.%d", n) }

// PowerCutRequests lists the sequence numbers of the power-cut requests in
// the share directory dir that have not been answered yet. The host polls
// it.
func PowerCutRequests(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	for _, e := range ents {
		done[e.Name()] = true
	}
	var ns []int
	for _, e := range ents {
		var n int
		if _, err := fmt.Sscanf(e.Name(), "power-cut.%d", &n); err != nil || e.Name() != powerCutFile(n) {
			continue
		}
		if !done[powerCutFile(n)+".done"] {
			ns = append(ns, n)
		}
	}
	return ns, nil
}

// AnswerPowerCut records that the host cut the peer's power for request n.
func AnswerPowerCut(dir string, n int, at time.Time) error {
	return WriteFileAtomic(filepath.Join(dir, powerCutFile(n)+".done"), []byte(at.UTC().Format(time.RFC3339Nano)+"\n"))
}

// CutPeerPower asks the host to cut the peer's power and waits until it
// has: when it returns nil the peer's QEMU is gone and its next boot has
// begun. n numbers the request and must be new in the run.
func CutPeerPower(ctx context.Context, n int, timeout time.Duration) error {
	if Role() != RoleMain {
		return errors.New("cut the peer's power: this guest is not the main guest of a two-guest run")
	}
	req := filepath.Join(ShareDir, powerCutFile(n))
	if _, err := os.Stat(req); err == nil {
		return fmt.Errorf("cut the peer's power: request %d was made before", n)
	}
	if err := WriteFileAtomic(req, []byte("cut\n")); err != nil {
		return fmt.Errorf("cut the peer's power: %w", err)
	}
	return WaitFile(ctx, req+".done", timeout)
}

// WaitFile waits until path exists.
func WaitFile(ctx context.Context, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WriteFileAtomic writes a file that a reader on the other side of the
// share sees whole or not at all: a temporary name, then a rename.
func WriteFileAtomic(path string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
