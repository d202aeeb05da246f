package fencing

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DamagedDir is the subdirectory of a store's directory where ResetMark and
// ResetLedger keep the damaged files they replace. The store never reads
// it; an operator may inspect and remove its files at leisure.
const DamagedDir = "damaged"

// MarkFile is one volume's mark file as Inspect or InspectMark read it.
type MarkFile struct {
	// VolumeID is the volume whose mark the file is.
	VolumeID string
	// Path is the file.
	Path string
	// Mark is the file's mark; nil when the volume has no mark file or Err
	// is set.
	Mark *Mark
	// Err says why the mark cannot be read: the store refuses every
	// request for the volume (MARK_UNREADABLE) until ResetMark replaces it.
	// It wraps ErrCorruptMark when the bytes do not decode.
	Err error
	// Salvage is what a best-effort reading of an unreadable file found,
	// nil if nothing could be read.
	Salvage *Salvage
}

// Inventory is what a store's directory holds, as Inspect read it.
type Inventory struct {
	// Dir is the directory.
	Dir string
	// Marks are the mark files, sorted by volume ID.
	Marks []MarkFile
	// Retired is how many lifecycles the ledger of retired lifecycles
	// holds; 0 when there is no ledger or it cannot be read.
	Retired int
	// LedgerErr says why the ledger cannot be read. Open refuses the
	// directory until ResetLedger replaces it.
	LedgerErr error
	// Damaged lists the files kept in DamagedDir, by name.
	Damaged []string
	// ID is the store's identity (IdentityFileName) as the file says it;
	// empty when the store has none yet.
	ID string
}

// Inspect reads every mark file and the ledger of the store in dir. It
// writes nothing, creates nothing and takes no lock, so it may run while an
// agent holds the directory: the store replaces every file by an atomic
// rename, so each file is read whole, in its old or its new state. The
// files are read one after another, though, not as one snapshot, so the
// inventory can be behind a store that is running. It decides nothing:
// every decision is the store's, under its lock.
//
// A mark that cannot be read is reported in its MarkFile, not as an error;
// the error is for a directory that cannot be listed.
func Inspect(dir string) (*Inventory, error) {
	fail := func(path string, err error) (*Inventory, error) {
		return nil, &Error{Op: "inspect", Path: path, Err: err}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fail(dir, err)
	}
	inv := &Inventory{Dir: dir}
	for _, e := range entries {
		id, err := VolumeIDFromFileName(e.Name())
		if err != nil {
			continue
		}
		mf := inspectMark(id, filepath.Join(dir, e.Name()))
		if mf.Mark != nil || mf.Err != nil {
			inv.Marks = append(inv.Marks, mf)
		}
	}
	slices.SortFunc(inv.Marks, func(a, b MarkFile) int { return strings.Compare(a.VolumeID, b.VolumeID) })

	path := filepath.Join(dir, ledgerFileName)
	switch data, err := os.ReadFile(path); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		inv.LedgerErr = err
	default:
		if l, err := decodeLedger(data); err != nil {
			inv.LedgerErr = err
		} else {
			inv.Retired = len(l.fps)
		}
	}

	if data, err := os.ReadFile(filepath.Join(dir, IdentityFileName)); err == nil {
		inv.ID = strings.TrimSpace(string(data))
	}

	damaged, err := os.ReadDir(filepath.Join(dir, DamagedDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(filepath.Join(dir, DamagedDir), err)
	}
	for _, e := range damaged {
		inv.Damaged = append(inv.Damaged, e.Name())
	}
	return inv, nil
}

// InspectMark reads volume volumeID's mark file in the store directory dir,
// like Inspect and with its guarantees. A volume without a mark file has a
// MarkFile with neither Mark nor Err. The error is for an invalid volume ID
// or a directory that does not exist.
func InspectMark(dir, volumeID string) (MarkFile, error) {
	name, err := FileName(volumeID)
	if err != nil {
		return MarkFile{}, &Error{Op: "inspect", VolumeID: volumeID, Reason: ReasonMalformed, Err: err}
	}
	if fi, err := os.Stat(dir); err != nil {
		return MarkFile{}, &Error{Op: "inspect", Path: dir, Err: err}
	} else if !fi.IsDir() {
		return MarkFile{}, &Error{Op: "inspect", Path: dir, Err: fmt.Errorf("not a directory")}
	}
	return inspectMark(volumeID, filepath.Join(dir, name)), nil
}

func inspectMark(id, path string) MarkFile {
	mf := MarkFile{VolumeID: id, Path: path}
	data, err := readMarkData(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return mf
	case err != nil:
		mf.Err = err
		return mf
	}
	if mf.Mark, mf.Err = decodeMarkOf(id, data); mf.Err != nil {
		mf.Salvage = salvageMark(data)
	}
	return mf
}
