package kept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// Channel is the directory, in the run's uncached output share, through
// which the host and the keeper in the guest talk.
type Channel struct{ Dir string }

// The channel's fixed files.
const (
	readyFile  = "ready"  // the cluster is up (Ready, JSON)
	failedFile = "failed" // the keeper gave up (its error, text)
	downFile   = "down"   // the host asks the keeper to stop
)

// Ready is what the keeper reports once the cluster is up.
type Ready struct {
	Attach   string  `json:"attach"` // the attach state file, a guest path
	NodeName string  `json:"nodeName"`
	Uptime   float64 `json:"uptimeSeconds"` // guest uptime when ready
	MemMiB   int     `json:"memUsedMiB"`
}

// Request asks the keeper to run one test binary.
type Request struct {
	ID     string   `json:"id"`
	Binary string   `json:"binary"` // a guest path, usually in the channel
	Dir    string   `json:"dir"`    // the working directory (the package's)
	Args   []string `json:"args"`
}

// Status is the keeper's answer to a request.
type Status struct {
	ExitStatus int     `json:"exitStatus"`
	Error      string  `json:"error,omitempty"` // the binary did not run
	Seconds    float64 `json:"seconds"`
}

func (ch Channel) path(name string) string { return filepath.Join(ch.Dir, name) }

// RequestBinary is where the host puts the binary of request id.
func (ch Channel) RequestBinary(id string) string { return ch.path("req-" + id + ".test") }

func (ch Channel) requestFile(id string) string { return ch.path("req-" + id + ".json") }
func (ch Channel) logFile(id string) string     { return ch.path("req-" + id + ".log") }
func (ch Channel) statusFile(id string) string  { return ch.path("req-" + id + ".status") }
func (ch Channel) cancelFile(id string) string  { return ch.path("req-" + id + ".cancel") }

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return guest.WriteFileAtomic(path, append(b, '\n'))
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Submit writes the request: the keeper takes it on its next look.
func (ch Channel) Submit(r Request) error {
	if r.ID == "" || strings.ContainsAny(r.ID, "/.") {
		return fmt.Errorf("submit a request: bad id %q", r.ID)
	}
	if err := writeJSON(ch.requestFile(r.ID), r); err != nil {
		return fmt.Errorf("submit request %s: %w", r.ID, err)
	}
	return nil
}

// Cancel asks the keeper to stop the binary of request id.
func (ch Channel) Cancel(id string) error {
	return guest.WriteFileAtomic(ch.cancelFile(id), []byte("cancel\n"))
}

// Follow copies the output of request id to w as it grows until the
// keeper answers, and returns the answer. alive is asked at every look;
// an error from it (the guest died) ends the wait.
func (ch Channel) Follow(ctx context.Context, id string, w io.Writer, poll time.Duration, alive func() error) (Status, error) {
	var off int64
	copyNew := func() {
		f, err := os.Open(ch.logFile(id))
		if err != nil {
			return
		}
		defer f.Close()
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return
		}
		n, _ := io.Copy(w, f)
		off += n
	}
	for {
		var st Status
		err := readJSON(ch.statusFile(id), &st)
		copyNew()
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return st, fmt.Errorf("request %s: %w", id, err)
		}
		if err := alive(); err != nil {
			return st, fmt.Errorf("request %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("request %s: %w", id, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// next returns the oldest request without an answer, if any.
func (ch Channel) next() (Request, bool, error) {
	reqs, err := filepath.Glob(ch.path("req-*.json"))
	if err != nil {
		return Request{}, false, err
	}
	// Glob sorts; IDs begin with the time of the request.
	for _, p := range reqs {
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "req-"), ".json")
		if exists(ch.statusFile(id)) {
			continue
		}
		var r Request
		if err := readJSON(p, &r); err != nil {
			return Request{}, false, err
		}
		return r, true, nil
	}
	return Request{}, false, nil
}
