package marks

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/fencing"
)

// DefaultLockTimeout is how long a command that writes waits for the
// directory's lock before it gives up: long enough for an agent that is
// shutting down to let go, short enough to tell at once that one runs.
const DefaultLockTimeout = 5 * time.Second

// Commands of pillar-agent marks.
const (
	CommandList        = "list"
	CommandShow        = "show"
	CommandRetire      = "retire"
	CommandEnd         = "end"
	CommandReset       = "reset"
	CommandAdopt       = "adopt"
	CommandResetLedger = "reset-ledger"
)

// Options are one parsed pillar-agent marks command line.
type Options struct {
	// Command is one of the Command* constants.
	Command string
	// Dir is the fencing directory, the agent's -generations-dir.
	Dir string
	// Volume is the volume ID of show, end, reset and adopt.
	Volume string
	// JSON selects JSON output for list and show.
	JSON bool
	// Grace is retire's grace: tombstones younger than this stay.
	Grace time.Duration
	// Keep are volumes retire leaves alone.
	Keep []string
	// UID is the lifecycle of end, reset and adopt.
	UID string
	// Generation is the generation of reset and adopt.
	Generation uint64
	// Ended makes reset and adopt write a tombstone.
	Ended bool
	// AcceptLoss lets reset and reset-ledger go ahead although they lose
	// ended lifecycles the damaged file held.
	AcceptLoss bool
	// Yes writes; without it, a command that writes only says what it
	// would do.
	Yes bool
	// LockTimeout bounds the wait for the directory's lock.
	LockTimeout time.Duration
}

type command struct {
	args    string // after the command name, in the usage line
	summary string
	about   string // the -h text
}

var commands = map[string]command{
	CommandList: {"", "every mark: volume, state, lifecycle, generation, history; the ledger's size",
		`Lists every mark of the directory with its state (active, ended or
unreadable), lifecycle UID, generation and the number of ended lifecycles
it remembers, then the size of the ledger of retired lifecycles and the
damaged files kept by earlier resets. It only reads, without the lock, so
it also runs while pillar-agent does (kubectl exec into its pod).`},
	CommandShow: {"VOLUME", "one mark in full; for a damaged one, what can still be read from it",
		`Shows one volume's mark in full: state, lifecycle, generation and every
ended lifecycle with the time it ended. For an unreadable mark it shows
why, and what a best-effort reading of the damaged file finds (unverified;
compare it with the cluster before a reset). It only reads, without the
lock, so it also runs while pillar-agent does.`},
	CommandRetire: {"-grace DURATION", "remove tombstones that ended at least DURATION ago; their lifecycles go to the ledger",
		`Removes the mark files of volumes whose lifecycle ended at least -grace
ago, after writing every lifecycle they list to the ledger of retired
lifecycles, so that all of them stay refused for ever. During the grace a
retried DeleteVolume of the ended lifecycle is still accepted; after
retirement it is refused with LIFECYCLE_ENDED, which pillar-controller does
not take for success. Choose a grace longer than any deletion could still
be retrying, and -keep every volume whose PillarVolumeState still exists or
whose storage is known to remain.`},
	CommandEnd: {"-uid UID VOLUME", "end lifecycle UID, the mark's active one, whose PillarVolumeState is gone (LIFECYCLE_REPLACED)",
		`Ends lifecycle -uid of VOLUME, as an accepted DeleteVolume of it at the
mark's generation would: the mark becomes a tombstone and the UID joins
its history, so that lifecycle is refused for ever and the next new
lifecycle is admitted by the ordinary rules. -uid must be the mark's
active lifecycle; anything else is refused. Use it when every new
lifecycle of the volume is refused with LIFECYCLE_REPLACED and the
PillarVolumeState with -uid no longer exists.`},
	CommandReset: {"-uid UID -generation N VOLUME", "replace a damaged mark (MARK_UNREADABLE) with lifecycle UID at generation N",
		`Replaces VOLUME's unreadable mark with one for the lifecycle and
generation the cluster records:
  kubectl get pillarvolumestate VOLUME -o jsonpath='{.metadata.uid} {.spec.publicationGeneration}'
The damaged file is kept under the directory's damaged/ subdirectory, and
every lifecycle that can still be read from it is written to the ledger as
ended. A readable mark, a retired -uid, and a damaged file that lists -uid
as ended (unless -ended) are refused. Unless the damaged file's list of
ended lifecycles reads back intact, -accept-loss is required: a lifecycle
that ended on the volume before the damage and cannot be read back would
be admitted again once -uid ends.`},
	CommandAdopt: {"-uid UID -generation N VOLUME", "write the lost mark (UNMARKED) of a volume that exists: lifecycle UID at generation N",
		`Writes the mark of VOLUME, which exists on this storage node but has no
mark (pillar-agent refuses every change of it with UNMARKED: its mark was
lost with a wiped or replaced directory, or a disk that was not mounted),
for the lifecycle and generation the cluster records:
  kubectl get pillarvolumestate VOLUME -o jsonpath='{.metadata.uid} {.spec.publicationGeneration}'
Use -ended if the object has a deletionTimestamp. A volume that has a mark
file (readable or not) and a retired -uid are refused. Adopt only volumes
whose PillarVolumeState exists: a volume that no PillarVolumeState names is
not the cluster's, and stays refused until an operator removes it.`},
	CommandResetLedger: {"", "replace a damaged ledger of retired lifecycles with its whole records",
		`Replaces the ledger of retired lifecycles, which pillar-agent refuses to
start without, by one holding every whole record of the damaged file (the
file has one checksum, so a damaged record cannot be told from an intact
one; keeping it can only refuse a lifecycle that never existed). The
damaged file is kept under damaged/. What the damaged or cut-off records
held is lost, so -accept-loss is always required.`},
}

var order = []string{CommandList, CommandShow, CommandRetire, CommandEnd, CommandReset, CommandAdopt, CommandResetLedger}

// usage is the text of pillar-agent marks -h.
func usage() string {
	var b strings.Builder
	b.WriteString(`Usage: pillar-agent marks COMMAND [flags]

Inspects and repairs the durable fencing marks of this storage node, in
-generations-dir (default ` + fencing.DefaultDir + `).
list and show only read, without the directory's lock, so they run beside
pillar-agent. The other commands change the directory and take its lock:
they refuse to run while pillar-agent holds it (stop pillar-agent on this
node first), and they only say what they would do unless -yes is given.

Commands:
`)
	for _, name := range order {
		c := commands[name]
		line := "  " + name
		if c.args != "" {
			line += " " + c.args
		}
		if len(line) < 26 {
			fmt.Fprintf(&b, "%-26s%s\n", line, c.summary)
		} else {
			fmt.Fprintf(&b, "%s\n%26s%s\n", line, "", c.summary)
		}
	}
	b.WriteString(`
pillar-agent marks COMMAND -h lists a command's flags. The procedures, and
why each command cannot let a stale lifecycle write again, are in the
documentation of github.com/pillar-csi/pillar-csi/agent/app, "Fencing marks".
`)
	return b.String()
}

// ParseArgs parses the arguments that follow "marks" on the command line.
// On -h it writes the usage to output and returns flag.ErrHelp. Bad
// arguments are errors that name the flag or argument; ParseArgs never
// exits.
func ParseArgs(args []string, output io.Writer) (Options, error) {
	o := Options{Dir: fencing.DefaultDir, LockTimeout: DefaultLockTimeout}
	if len(args) == 0 {
		return Options{}, errors.New("marks: a command is required: " + strings.Join(order, ", ") + " (see pillar-agent marks -h)")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(output, usage())
		return Options{}, flag.ErrHelp
	}
	o.Command = args[0]
	cmd, ok := commands[o.Command]
	if !ok {
		return Options{}, fmt.Errorf("marks: unknown command %q: want one of %s", o.Command, strings.Join(order, ", "))
	}

	fs := flag.NewFlagSet("pillar-agent marks "+o.Command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.Dir, "generations-dir", o.Dir, "`directory` of the fencing marks: pillar-agent's -generations-dir (from a kubectl debug node pod: /host followed by the chart's agent.generationsDir)")
	format := "text"
	switch o.Command {
	case CommandList, CommandShow:
		fs.StringVar(&format, "o", format, "output `format`: text or json")
	default:
		fs.BoolVar(&o.Yes, "yes", false, "write the change; without it the command only says what it would do")
		fs.DurationVar(&o.LockTimeout, "lock-timeout", o.LockTimeout, "how long to wait for the directory's lock, which pillar-agent holds while it runs")
	}
	switch o.Command {
	case CommandRetire:
		fs.DurationVar(&o.Grace, "grace", 0, "retire tombstones whose lifecycle ended at least this long ago (required; e.g. 720h)")
		fs.Func("keep", "`volume` ID whose tombstone stays, e.g. while its storage still exists (repeatable)", func(v string) error {
			o.Keep = append(o.Keep, v)
			return nil
		})
	case CommandEnd:
		fs.StringVar(&o.UID, "uid", "", "the lifecycle `UID` to end: the mark's active lifecycle, whose PillarVolumeState is gone (required)")
	case CommandReset, CommandAdopt:
		fs.StringVar(&o.UID, "uid", "", "the volume's lifecycle `UID`: its PillarVolumeState's metadata.uid (required)")
		fs.Uint64Var(&o.Generation, "generation", 0, "the lifecycle's current `generation`: its PillarVolumeState's spec.publicationGeneration (required)")
		fs.BoolVar(&o.Ended, "ended", false, "write the lifecycle as ended: for a PillarVolumeState that is being deleted (it has a deletionTimestamp)")
	}
	switch o.Command {
	case CommandReset, CommandResetLedger:
		fs.BoolVar(&o.AcceptLoss, "accept-loss", false, "go ahead although ended lifecycles that the damaged file held and that cannot be read back are no longer known to have ended, as described above")
	}

	positional, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage := "Usage: pillar-agent marks " + o.Command
			if cmd.args != "" {
				usage += " " + cmd.args
			}
			fmt.Fprintf(output, "%s [flags]\n\n%s\n\nFlags:\n", usage, cmd.about)
			fs.SetOutput(output)
			fs.PrintDefaults()
			return Options{}, err
		}
		return Options{}, fmt.Errorf("marks %s: %w", o.Command, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	bad := func(format string, args ...any) (Options, error) {
		return Options{}, fmt.Errorf("marks %s: "+format, append([]any{o.Command}, args...)...)
	}
	wantVolume := strings.HasSuffix(cmd.args, "VOLUME")
	switch {
	case wantVolume && len(positional) != 1:
		return bad("takes exactly one VOLUME argument, got %d", len(positional))
	case !wantVolume && len(positional) > 0:
		return bad("unexpected argument %q", positional[0])
	case wantVolume:
		o.Volume = positional[0]
		if err := fencing.ValidateVolumeID(o.Volume); err != nil {
			return bad("VOLUME: %v", err)
		}
	}
	if o.Dir == "" {
		return bad("-generations-dir: must not be empty")
	}
	switch format {
	case "text":
	case "json":
		o.JSON = true
	default:
		return bad("-o: %q is neither text nor json", format)
	}
	if o.LockTimeout <= 0 {
		return bad("-lock-timeout: %v must be positive", o.LockTimeout)
	}
	switch o.Command {
	case CommandRetire:
		if !set["grace"] {
			return bad("-grace: required: how long after its lifecycle ended a tombstone is kept (e.g. 720h)")
		}
		if o.Grace < 0 {
			return bad("-grace: %v is negative", o.Grace)
		}
	case CommandEnd, CommandReset, CommandAdopt:
		if !set["uid"] {
			return bad("-uid: required")
		}
		if err := (fencing.Token{UID: o.UID, Generation: 1}).Validate(); err != nil {
			return bad("-uid: %v", err)
		}
		if o.Command != CommandEnd && !set["generation"] {
			return bad("-generation: required: the PillarVolumeState's spec.publicationGeneration")
		}
	}
	return o, nil
}

// parseInterspersed parses flags before, between and after positional
// arguments ("show VOLUME -o json"); after "--" everything is positional,
// so a volume ID may start with "-".
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
