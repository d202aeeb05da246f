// Command nvmet-export shows how a tool unrelated to pillar-csi uses the
// configfs module: it exports a block device (or a regular file) over
// NVMe/TCP, lists what the kernel target serves, and removes an export.
//
//	nvmet-export apply -nqn NQN -device /dev/vg0/lv0 -addr 192.0.2.10 [-port 4420] [-host HOSTNQN]... [-any-host]
//	nvmet-export show [-json]
//	nvmet-export remove -nqn NQN
//
// Every subcommand takes -root (default /sys/kernel/config) and -timeout.
// It needs root and the nvmet and nvmet-tcp modules loaded.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/configfs"
)

// config is everything the command line says.
type config struct {
	cmd     string
	root    string
	timeout time.Duration
	nqn     string
	device  string
	nsid    uint
	addr    string
	port    string
	hosts   []string
	anyHost bool
	jsonOut bool
}

type hostList []string

func (h *hostList) String() string     { return strings.Join(*h, ",") }
func (h *hostList) Set(v string) error { *h = append(*h, v); return nil }

func parse(args []string) (config, error) {
	if len(args) == 0 {
		return config{}, fmt.Errorf("usage: nvmet-export apply|show|remove [flags]")
	}
	c := config{cmd: args[0]}
	fs := flag.NewFlagSet("nvmet-export "+c.cmd, flag.ContinueOnError)
	fs.StringVar(&c.root, "root", configfs.DefaultRoot, "configfs mount point")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	switch c.cmd {
	case "apply":
		fs.StringVar(&c.nqn, "nqn", "", "subsystem NQN (required)")
		fs.StringVar(&c.device, "device", "", "block device or file to export as namespace 1 (required)")
		fs.UintVar(&c.nsid, "nsid", 1, "namespace ID")
		fs.StringVar(&c.addr, "addr", "", "IPv4 or IPv6 address to listen on (required)")
		fs.StringVar(&c.port, "port", "4420", "TCP port to listen on")
		fs.Var((*hostList)(&c.hosts), "host", "host NQN allowed to connect (repeatable)")
		fs.BoolVar(&c.anyHost, "any-host", false, "let any host connect")
	case "remove":
		fs.StringVar(&c.nqn, "nqn", "", "subsystem NQN (required)")
	case "show":
		fs.BoolVar(&c.jsonOut, "json", false, "print the whole tree as JSON")
	default:
		return c, fmt.Errorf("unknown subcommand %q (want apply, show or remove)", c.cmd)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return c, err
	}
	if c.cmd != "show" && c.nqn == "" {
		return c, fmt.Errorf("-nqn is required")
	}
	if c.cmd == "apply" && (c.device == "" || c.addr == "") {
		return c, fmt.Errorf("-device and -addr are required")
	}
	return c, nil
}

func (c config) export() configfs.Export {
	fam := "ipv4"
	if strings.Contains(c.addr, ":") {
		fam = "ipv6"
	}
	return configfs.Export{
		NQN:          c.nqn,
		Attrs:        configfs.SubsystemAttrs{AllowAnyHost: c.anyHost},
		Namespaces:   []configfs.Namespace{{NSID: uint32(c.nsid), DevicePath: c.device, Enabled: true}},
		Ports:        []configfs.Address{{TrType: "tcp", AdrFam: fam, TrAddr: c.addr, TrSvcID: c.port}},
		AllowedHosts: c.hosts,
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	fs := configfs.NewFS(c.root)
	switch c.cmd {
	case "apply":
		return fs.Apply(ctx, c.export())
	case "remove":
		return fs.Remove(ctx, c.nqn)
	}
	st, err := fs.Read(ctx)
	if err != nil {
		return err
	}
	if c.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	for _, p := range st.Ports {
		for _, nqn := range p.Subsystems {
			fmt.Fprintf(out, "port %d %s %s\n", p.ID, p.Address, nqn)
		}
	}
	for _, s := range st.Subsystems {
		access := "hosts " + strings.Join(s.AllowedHosts, ",")
		if s.Attrs.AllowAnyHost {
			access = "any host"
		}
		fmt.Fprintf(out, "subsystem %s (%s)\n", s.NQN, access)
		for _, ns := range s.Namespaces {
			fmt.Fprintf(out, "  namespace %d %s enabled=%v\n", ns.NSID, ns.DevicePath, ns.Enabled)
		}
	}
	return nil
}

func main() {
	c, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmet-export:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nvmet-export:", err)
		if configfs.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "nvmet-export: is the nvmet module loaded (modprobe nvmet nvmet-tcp)?")
		}
		os.Exit(1)
	}
}
