// Command pillar-agent serves the pillar-csi agent gRPC API on a storage
// node. Run it with -h for its flags; package app documents its behaviour.
// "pillar-agent marks" inspects and repairs the node's fencing marks
// (package marks).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/pillar-csi/pillar-csi/agent/app"
	"github.com/pillar-csi/pillar-csi/agent/marks"
)

func main() { os.Exit(run()) }

func run() int {
	if len(os.Args) > 1 && os.Args[1] == "marks" {
		return runMarks(os.Args[2:])
	}
	opts, err := app.ParseFlags(os.Args[1:], os.Getenv, os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-agent: %v\n", err)
		return 2
	}
	opts.Version = version()
	if opts.PrintVersion {
		fmt.Println("pillar-agent", opts.Version)
		return 0
	}
	// SIGTERM from the kubelet, SIGINT from a terminal: both shut down
	// gracefully. A second signal is left to the default action (exit).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := app.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runMarks is "pillar-agent marks": the operator's command for the
// fencing marks, in the agent's binary so the image needs nothing else.
func runMarks(args []string) int {
	opts, err := marks.ParseArgs(args, os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-agent %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := marks.Run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "pillar-agent marks %s: %v\n", opts.Command, err)
		return 1
	}
	return 0
}

// buildVersion is set by the build: `make build` stamps the commit
// (-ldflags "-X main.buildVersion=..."), a release build the module's tag.
var buildVersion string

// version is the stamped version, else the module version the binary was
// built from (`go install ...@v1.2.3`), else "(devel)".
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
