package kernelvm

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// PeerOptions describe the second guest of a two-guest run (see
// guest.RoleParam): the end-to-end suite's storage node, a kernel of its
// own whose power the tests can cut.
type PeerOptions struct {
	VM VMConfig
	// DiskMiB are the sizes of the peer's disks, /dev/vda first: sparse
	// raw images in the peer's run directory, kept across its power cuts
	// and removed with the run.
	DiskMiB []int
}

// pair is the host's side of a two-guest run: the share both guests mount,
// the link between them, and the peer's boots.
type pair struct {
	share string
	main  *Link
	peer  BootOptions
	run   *Run
	log   io.Writer
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// shareMount is the guest shell line that mounts the share.
const shareMount = `mkdir -p ` + guest.ShareDir + ` && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none ` + ShareTag + ` ` + guest.ShareDir + ` || exit 125
`

// newPair prepares a two-guest run next to the main run: the share (in
// the main run's directory), two free UDP ports on 127.0.0.1 for the link,
// and the peer's run directory with its disks. script is the peer's
// guest.sh body after the share is mounted.
func (l *Lab) newPair(main *Run, p *PeerOptions, script string, log io.Writer) (*pair, error) {
	const op = "prepare the peer guest"
	share := filepath.Join(main.Dir, "share")
	if err := os.Mkdir(share, 0o777); err != nil {
		return nil, &Error{Op: op, Path: share, Err: err}
	}
	ports, err := freeUDPPorts(2)
	if err != nil {
		return nil, &Error{Op: op, Err: err}
	}
	run, err := l.NewRun()
	if err != nil {
		return nil, err
	}
	var disks []string
	for i, mib := range p.DiskMiB {
		d := filepath.Join(run.Dir, fmt.Sprintf("disk%d.raw", i))
		f, err := os.Create(d)
		if err == nil {
			err = f.Truncate(int64(mib) << 20)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			run.Remove()
			return nil, &Error{Op: op, Path: d, Err: err}
		}
		disks = append(disks, d)
	}
	vm := p.VM
	vm.KernelArgs = append(append([]string(nil), vm.KernelArgs...), guest.RoleParam+"="+guest.RolePeer)
	return &pair{
		share: share,
		main:  &Link{LocalPort: ports[0], RemotePort: ports[1], MAC: "52:54:00:99:00:01"},
		peer: BootOptions{
			VM:     vm,
			Script: "#!/bin/sh\n" + guestEnv + shareMount + script,
			Link:   &Link{LocalPort: ports[1], RemotePort: ports[0], MAC: "52:54:00:99:00:02"},
			Disks:  disks,
			Share:  share,
			Stdout: &prefixWriter{w: log, prefix: "peer| "},
		},
		run: run,
		log: log,
	}, nil
}

// start boots the peer and keeps it running until stopped: each power-cut
// request in the share kills its QEMU, is answered, and boots it again
// from the same disks. A peer that powers off by itself is reported and
// stays off until the next request.
func (p *pair) start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for boot := 1; ctx.Err() == nil; boot++ {
			bctx, cancel := context.WithCancel(ctx)
			res := make(chan error, 1)
			go func() {
				_, err := p.run.Boot(bctx, p.peer)
				res <- err
			}()
			fmt.Fprintf(p.log, "pillar-lab: peer boot %d started\n", boot)
			running, cut := true, false
			for !cut && ctx.Err() == nil {
				select {
				case err := <-res:
					running = false
					fmt.Fprintf(p.log, "pillar-lab: the peer powered off by itself (boot %d): %v\n", boot, err)
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
					ns, err := guest.PowerCutRequests(p.share)
					if err != nil || len(ns) == 0 {
						continue
					}
					cancel()
					if running {
						<-res
					}
					at := time.Now()
					if err := guest.AnswerPowerCut(p.share, ns[0], at); err != nil {
						fmt.Fprintf(p.log, "pillar-lab: answer power cut %d: %v\n", ns[0], err)
					}
					fmt.Fprintf(p.log, "pillar-lab: the peer's power was cut (request %d, boot %d)\n", ns[0], boot)
					cut = true
				}
			}
			cancel()
			if running && !cut {
				<-res
			}
		}
	}()
}

// close powers the peer off and waits for its last boot to end.
func (p *pair) close() {
	if p.stop != nil {
		p.stop()
	}
	p.wg.Wait()
}

func freeUDPPorts(n int) ([]int, error) {
	var ports []int
	var conns []net.PacketConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a UDP port for the guests' link: %w", err)
		}
		conns = append(conns, c)
		ports = append(ports, c.LocalAddr().(*net.UDPAddr).Port)
	}
	return ports, nil
}

// prefixWriter prefixes every line written to it; the console streamer
// writes whole lines.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := strings.TrimSuffix(string(b), "\n")
	_, err := io.WriteString(p.w, p.prefix+strings.ReplaceAll(s, "\n", "\n"+p.prefix)+"\n")
	return len(b), err
}
