package fencing

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The store's identity.
//
// A marks directory that was lost (a wiped or replaced disk, a mount that
// did not come up) looks, to the agent that opens it, like a new store:
// empty, every volume unmarked. Rule 19 refuses the volumes that still
// exist, but what the lost directory knew of deleted volumes (tombstones,
// the ledger) is gone without a trace. So every store draws an identity
// when it is first opened and keeps it in IdentityFileName; pillar-agent
// reports it and pillar-controller pins it, and a store that comes back
// with another identity is a lost one, which the controller refuses to use
// until an operator accepts it.
const IdentityFileName = "store.id"

// identityLen is the length of an identity: 128 random bits in hex.
const identityLen = 32

// loadIdentity reads the identity of the store in dir, or draws and
// durably writes one if the store has none (a new store, or one made by a
// release before identities). A file that is not an identity fails: a
// damaged identity must not be taken for a new store silently.
func loadIdentity(d *os.File, dir string) (string, error) {
	path := filepath.Join(dir, IdentityFileName)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		var b [identityLen / 2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := hex.EncodeToString(b[:])
		if err := writeFileAtomic(d, dir, IdentityFileName, []byte(id+"\n")); err != nil {
			return "", err
		}
		return id, nil
	case err != nil:
		return "", err
	}
	id := strings.TrimSpace(string(data))
	if !validIdentity(id) {
		return "", fmt.Errorf("%w: %s holds %q, not a store identity (%d hex digits); "+
			"removing it draws a new identity, which pillar-controller then treats as a new, possibly lost, store",
			ErrCorruptMark, IdentityFileName, truncate(id, 64), identityLen)
	}
	return id, nil
}

func validIdentity(id string) bool {
	if len(id) != identityLen {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// ID returns the store's identity: 32 lower-case hex digits drawn when the
// store was first opened, the same for as long as its directory lasts.
func (s *Store) ID() string { return s.id }
