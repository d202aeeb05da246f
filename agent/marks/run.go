package marks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pillar-csi/pillar-csi/fencing"
)

// stopAgentHint is what a command that writes says when the directory is
// locked.
const stopAgentHint = "stop pillar-agent on this node first: with the chart, take the node out of the agent DaemonSet's nodeSelector " +
	"(by default: kubectl label node NODE pillar-csi.io/storage-node-), wait until its pod is gone, run this from a " +
	"kubectl debug node/NODE pod with -generations-dir /host" + fencing.DefaultDir + ", then label the node again"

// Run runs the command o describes, writing its report to out. A command
// that writes takes the directory's lock for the whole run, and without
// o.Yes only reports what it would do.
func Run(ctx context.Context, o Options, out io.Writer) error {
	switch o.Command {
	case CommandList:
		inv, err := fencing.Inspect(o.Dir)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(out, listJSON(inv))
		}
		return printList(out, inv)
	case CommandShow:
		mf, err := fencing.InspectMark(o.Dir, o.Volume)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(out, showJSON(mf))
		}
		printShow(out, mf)
		return nil
	}

	// Open never creates the directory for the tool: a mistyped
	// -generations-dir must not look like an empty store.
	if fi, err := os.Stat(o.Dir); err != nil {
		return fmt.Errorf("-generations-dir: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("-generations-dir: %s is not a directory", o.Dir)
	}
	lctx, cancel := context.WithTimeout(ctx, o.LockTimeout)
	defer cancel()
	if o.Command == CommandResetLedger {
		return resetLedger(lctx, o, out)
	}
	s, err := fencing.Open(lctx, o.Dir, fencing.Options{})
	switch {
	case errors.Is(err, fencing.ErrLocked):
		return lockedError(o.Dir, err)
	case errors.Is(err, fencing.ErrCorruptMark):
		return fmt.Errorf("%w; pillar-agent cannot start with it either: see pillar-agent marks reset-ledger -h", err)
	case err != nil:
		return err
	}
	defer s.Close()
	switch o.Command {
	case CommandRetire:
		return retire(ctx, s, o, out)
	case CommandEnd:
		return end(ctx, s, o, out)
	case CommandReset:
		return reset(ctx, s, o, out)
	case CommandAdopt:
		return adopt(ctx, s, o, out)
	}
	return fmt.Errorf("marks: unknown command %q", o.Command)
}

// lockedError says that another process holds dir, and what to do.
func lockedError(dir string, err error) error {
	return fmt.Errorf("%s is locked by another process, most likely pillar-agent: %s (%w)", dir, stopAgentHint, err)
}

func dryRunFooter(out io.Writer) {
	fmt.Fprintln(out, "dry run: nothing was written; run again with -yes to write it")
}

func retire(ctx context.Context, s *fencing.Store, o Options, out io.Writer) error {
	ro := fencing.RetireOptions{Grace: o.Grace, DryRun: !o.Yes}
	if len(o.Keep) > 0 {
		ro.Keep = func(id string) bool {
			for _, k := range o.Keep {
				if k == id {
					return true
				}
			}
			return false
		}
	}
	ids, err := s.Retire(ctx, ro)
	verb, ledgered := "retired", "is now in the ledger of retired lifecycles and stays refused"
	if !o.Yes {
		verb, ledgered = "would retire", "would go to the ledger of retired lifecycles and stay refused"
	}
	fmt.Fprintf(out, "%s %d tombstones whose lifecycle ended at least %v ago", verb, len(ids), o.Grace)
	if len(ids) > 0 {
		fmt.Fprintf(out, "; every lifecycle they list %s:", ledgered)
	}
	fmt.Fprintln(out)
	for _, id := range ids {
		fmt.Fprintf(out, "  %s\n", showID(id))
	}
	if !o.Yes && len(ids) > 0 {
		dryRunFooter(out)
	}
	return err
}

func end(ctx context.Context, s *fencing.Store, o Options, out io.Writer) error {
	plan, err := s.EndLifecycle(ctx, o.Volume, o.UID, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "volume %s: mark %v\n", showID(o.Volume), plan.Before)
	if !plan.Changed {
		fmt.Fprintf(out, "lifecycle %q has already ended: nothing to do\n", o.UID)
		return nil
	}
	if !o.Yes {
		fmt.Fprintf(out, "would end lifecycle %q at generation %d: the mark would become %v\n", o.UID, plan.After.Generation, plan.After)
		dryRunFooter(out)
		return nil
	}
	res, err := s.EndLifecycle(ctx, o.Volume, o.UID, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ended lifecycle %q: the mark is now %v (%s)\n", o.UID, res.After, res.Path)
	return nil
}

func reset(ctx context.Context, s *fencing.Store, o Options, out io.Writer) error {
	ro := fencing.ResetOptions{Token: fencing.Token{UID: o.UID, Generation: o.Generation}, Ended: o.Ended, AcceptLoss: o.AcceptLoss, DryRun: true}
	plan, err := s.ResetMark(ctx, o.Volume, ro)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "volume %s: mark unreadable (%s): %v\n", showID(o.Volume), plan.Path, plan.Damage)
	if plan.Salvage != nil {
		fmt.Fprintf(out, "read back from the damaged file (unverified): %s\n", salvageLine(plan.Salvage))
	} else {
		fmt.Fprintln(out, "nothing could be read back from the damaged file")
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	if len(plan.Ledgered) > 0 {
		fmt.Fprintf(out, "lifecycles read back from it, to be written to the ledger as ended: %s\n", quoteAll(plan.Ledgered))
	}
	needLoss := !plan.HistoryIntact
	if needLoss {
		fmt.Fprintf(out, "its list of ended lifecycles did not read back intact: one that ended on this volume before the damage and is not listed above would be admitted again once lifecycle %q ends; -accept-loss accepts that\n", o.UID)
	} else {
		fmt.Fprintln(out, "its list of ended lifecycles read back intact: no ended lifecycle is lost")
	}
	if !o.Yes {
		fmt.Fprintf(out, "would keep the damaged file under %s and write the mark %v\n", filepath.Join(o.Dir, fencing.DamagedDir), plan.Mark)
		dryRunFooter(out)
		return nil
	}
	if needLoss && !o.AcceptLoss {
		return errors.New("nothing was written: -accept-loss is required (see above)")
	}
	ro.DryRun = false
	res, err := s.ResetMark(ctx, o.Volume, ro)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "kept the damaged file as %s\n", res.Kept)
	if len(res.Ledgered) > 0 {
		fmt.Fprintf(out, "wrote %d lifecycles to the ledger as ended\n", len(res.Ledgered))
	}
	fmt.Fprintf(out, "wrote the mark %v (%s)\n", res.Mark, res.Path)
	return nil
}

func adopt(ctx context.Context, s *fencing.Store, o Options, out io.Writer) error {
	m, err := s.Adopt(ctx, o.Volume, fencing.AdoptOptions{Token: fencing.Token{UID: o.UID, Generation: o.Generation}, Ended: o.Ended, DryRun: !o.Yes})
	if err != nil {
		return err
	}
	if !o.Yes {
		fmt.Fprintf(out, "volume %s has no mark; would write the mark %v\n", showID(o.Volume), m)
		dryRunFooter(out)
		return nil
	}
	fmt.Fprintf(out, "volume %s: wrote the mark %v\n", showID(o.Volume), m)
	return nil
}

func resetLedger(lctx context.Context, o Options, out io.Writer) error {
	opts := fencing.LedgerResetOptions{AcceptLoss: o.AcceptLoss, DryRun: !o.Yes}
	if o.Yes && !o.AcceptLoss {
		opts.DryRun = true
	}
	res, err := fencing.ResetLedger(lctx, o.Dir, opts)
	if errors.Is(err, fencing.ErrLocked) {
		return lockedError(o.Dir, err)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "ledger unreadable (%s): %v\n", res.Path, res.Damage)
	announced := "no readable header"
	if res.Announced >= 0 {
		announced = "its header announces " + strconv.FormatInt(res.Announced, 10) + " retired lifecycles"
	}
	fmt.Fprintf(out, "%s; %d whole records remain, damaged or not, and are all kept\n", announced, res.Kept)
	fmt.Fprintln(out, "a retired lifecycle whose record was damaged or cut off is no longer known to have ended; -accept-loss accepts that")
	switch {
	case !o.Yes:
		fmt.Fprintf(out, "would keep the damaged file under %s and write a ledger of %d records\n", filepath.Join(o.Dir, fencing.DamagedDir), res.Kept)
		dryRunFooter(out)
		return nil
	case !o.AcceptLoss:
		return errors.New("nothing was written: -accept-loss is required (see above)")
	}
	fmt.Fprintf(out, "kept the damaged file as %s\n", res.KeptPath)
	fmt.Fprintf(out, "wrote a ledger of %d records (%s)\n", res.Kept, res.Path)
	return nil
}

// showID prints a volume ID as it is when it is plain, quoted otherwise.
func showID(id string) string {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e || c == '"' {
			return strconv.Quote(id)
		}
	}
	return id
}

func quoteAll(uids []string) string {
	q := make([]string, len(uids))
	for i, u := range uids {
		q[i] = strconv.Quote(u)
	}
	return strings.Join(q, ", ")
}

func salvageLine(sv *fencing.Salvage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "volume %s, %s lifecycle %q at generation %d, %d ended lifecycles", showID(sv.VolumeID), sv.Phase, sv.UID, sv.Generation, len(sv.History))
	switch {
	case sv.ChecksumOK:
		b.WriteString("; checksum matches")
	default:
		b.WriteString("; checksum fails")
	}
	if !sv.Complete {
		b.WriteString("; file cut short or overlong")
	}
	return b.String()
}

func printList(out io.Writer, inv *fencing.Inventory) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tSTATE\tLIFECYCLE\tGENERATION\tHISTORY")
	var unreadable []fencing.MarkFile
	for _, mf := range inv.Marks {
		if mf.Err != nil {
			unreadable = append(unreadable, mf)
			fmt.Fprintf(tw, "%s\tunreadable\t-\t-\t-\n", showID(mf.VolumeID))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", showID(mf.VolumeID), mf.Mark.Phase, mf.Mark.UID, mf.Mark.Generation, len(mf.Mark.History))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d marks in %s, store identity %s\n", len(inv.Marks), inv.Dir, cmp.Or(inv.ID, "(none yet)"))
	for _, mf := range unreadable {
		fmt.Fprintf(out, "unreadable: %s: %v\n", showID(mf.VolumeID), mf.Err)
	}
	if inv.LedgerErr != nil {
		fmt.Fprintf(out, "ledger: UNREADABLE, pillar-agent cannot start: %v\n", inv.LedgerErr)
	} else {
		fmt.Fprintf(out, "ledger: %d retired lifecycles\n", inv.Retired)
	}
	if len(inv.Damaged) > 0 {
		fmt.Fprintf(out, "damaged files kept by earlier resets: %d in %s\n", len(inv.Damaged), filepath.Join(inv.Dir, fencing.DamagedDir))
	}
	return nil
}

func printShow(out io.Writer, mf fencing.MarkFile) {
	fmt.Fprintf(out, "volume:      %s\nfile:        %s\n", showID(mf.VolumeID), mf.Path)
	switch {
	case mf.Err != nil:
		fmt.Fprintf(out, "state:       unreadable (every request for the volume is refused: MARK_UNREADABLE)\nerror:       %v\n", mf.Err)
		if sv := mf.Salvage; sv != nil {
			fmt.Fprintf(out, "read back from the damaged file (unverified):\n  %s\n", salvageLine(sv))
			printHistory(out, sv.History)
		} else {
			fmt.Fprintln(out, "nothing can be read back from the damaged file")
		}
	case mf.Mark == nil:
		fmt.Fprintln(out, "state:       none (no mark file: the volume is unknown here, or its tombstone was retired)")
	default:
		m := mf.Mark
		fmt.Fprintf(out, "state:       %s\nlifecycle:   %s\ngeneration:  %d\n", m.Phase, m.UID, m.Generation)
		printHistory(out, m.History)
	}
}

func printHistory(out io.Writer, h []fencing.EndedLifecycle) {
	fmt.Fprintf(out, "history:     %d ended lifecycles, oldest first\n", len(h))
	for _, e := range h {
		fmt.Fprintf(out, "  %s  ended %s\n", e.UID, e.At.UTC().Format(time.RFC3339Nano))
	}
}

// JSON shapes of list and show. Field names are part of the interface:
// scripts read them.
type (
	listOutput struct {
		Dir               string      `json:"dir"`
		StoreID           string      `json:"storeID,omitempty"`
		Marks             []markEntry `json:"marks"`
		RetiredLifecycles int         `json:"retiredLifecycles"`
		LedgerError       string      `json:"ledgerError,omitempty"`
		DamagedFiles      []string    `json:"damagedFiles,omitempty"`
	}
	markEntry struct {
		VolumeID      string  `json:"volumeID"`
		File          string  `json:"file"`
		State         string  `json:"state"` // active, ended, unreadable (show: also none)
		LifecycleUID  string  `json:"lifecycleUID,omitempty"`
		Generation    *uint64 `json:"generation,omitempty"`
		HistoryLength *int    `json:"historyLength,omitempty"`
		Error         string  `json:"error,omitempty"`
	}
	showOutput struct {
		markEntry
		History    []historyEntry `json:"history,omitempty"`
		Unverified *salvageOutput `json:"unverified,omitempty"`
	}
	historyEntry struct {
		LifecycleUID string    `json:"lifecycleUID"`
		EndedAt      time.Time `json:"endedAt"`
	}
	salvageOutput struct {
		VolumeID     string         `json:"volumeID"`
		Phase        string         `json:"phase"`
		LifecycleUID string         `json:"lifecycleUID"`
		Generation   uint64         `json:"generation"`
		History      []historyEntry `json:"history"`
		Complete     bool           `json:"complete"`
		ChecksumOK   bool           `json:"checksumOK"`
	}
)

func entryOf(mf fencing.MarkFile) markEntry {
	e := markEntry{VolumeID: mf.VolumeID, File: mf.Path}
	switch {
	case mf.Err != nil:
		e.State, e.Error = "unreadable", mf.Err.Error()
	case mf.Mark == nil:
		e.State = "none"
	default:
		g, n := mf.Mark.Generation, len(mf.Mark.History)
		e.State, e.LifecycleUID, e.Generation, e.HistoryLength = mf.Mark.Phase.String(), mf.Mark.UID, &g, &n
	}
	return e
}

func historyOf(h []fencing.EndedLifecycle) []historyEntry {
	out := make([]historyEntry, len(h))
	for i, e := range h {
		out[i] = historyEntry{LifecycleUID: e.UID, EndedAt: e.At.UTC()}
	}
	return out
}

func listJSON(inv *fencing.Inventory) listOutput {
	l := listOutput{Dir: inv.Dir, StoreID: inv.ID, Marks: []markEntry{}, RetiredLifecycles: inv.Retired, DamagedFiles: inv.Damaged}
	for _, mf := range inv.Marks {
		l.Marks = append(l.Marks, entryOf(mf))
	}
	if inv.LedgerErr != nil {
		l.LedgerError = inv.LedgerErr.Error()
	}
	return l
}

func showJSON(mf fencing.MarkFile) showOutput {
	s := showOutput{markEntry: entryOf(mf)}
	if mf.Mark != nil {
		s.History = historyOf(mf.Mark.History)
	}
	if sv := mf.Salvage; sv != nil {
		s.Unverified = &salvageOutput{VolumeID: sv.VolumeID, Phase: sv.Phase.String(), LifecycleUID: sv.UID,
			Generation: sv.Generation, History: historyOf(sv.History), Complete: sv.Complete, ChecksumOK: sv.ChecksumOK}
	}
	return s
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
