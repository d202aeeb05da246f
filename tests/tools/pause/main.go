// Command pause is the lab cluster's sandbox ("pause") image: the process
// that holds a pod's namespaces open while its containers come and go.
//
// It is PID 1 of the sandbox, so it must reap: with a shared PID namespace,
// orphaned processes of the pod's containers are reparented to it, and an
// unreaped child stays a zombie for the pod's lifetime. It exits 0 on
// SIGTERM and SIGINT, which is how the container runtime stops a sandbox,
// and otherwise sleeps in signal delivery, using no CPU.
//
// It is built static (CGO_ENABLED=0), so the image needs nothing else.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// readyLine is written to stderr once the signal handlers are installed.
const readyLine = "pause: ready"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "-version") {
		fmt.Println("pause (pillar-csi)")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Until Notify returns, Go's runtime ends the process with status 2 on
	// SIGTERM; this line tells a watcher that the handlers are in place.
	fmt.Fprintln(os.Stderr, readyLine)
	// Reap children that died before the handler was installed.
	reap()
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child. SIGCHLD is not queued per child, so one
// signal may stand for several exits: loop until none is left.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
