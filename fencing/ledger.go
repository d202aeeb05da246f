package fencing

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// The ledger of retired lifecycles.
//
// Retiring a tombstone must not let its lifecycles back in, yet the whole
// point of retiring is to stop keeping a file per deleted volume. The ledger
// keeps the one thing needed to refuse an old lifecycle forever: a 16-byte
// fingerprint of (volume ID, lifecycle UID) for every lifecycle moved out of
// a mark, in one file for the whole store. It costs 16 bytes per ended
// lifecycle; a million deleted volumes make a 16 MiB ledger.
//
// A fingerprint is the first 16 bytes of SHA-256 over a domain string and
// the length-prefixed volume ID and UID. Two different lifecycles sharing a
// fingerprint (probability about n/2^128 for a new UID against n entries)
// would only make the store refuse the newer one: a false positive fails
// closed, never open.
//
// File format, version 1, integers little-endian:
//
//	"PCFL" | version u8 | count u32 | count × fingerprint (16 bytes, strictly ascending)
//	| CRC-32C (Castagnoli) of all preceding bytes, u32
const (
	ledgerFileName = "retired.ledger"
	ledgerMagic    = "PCFL"
	ledgerVersion  = 1
	ledgerDomain   = "pillar-csi fencing retired lifecycle v1\x00"
)

type fingerprint [16]byte

func fingerprintOf(volumeID, uid string) fingerprint {
	h := sha256.New()
	h.Write([]byte(ledgerDomain))
	h.Write([]byte{byte(len(volumeID))})
	h.Write([]byte(volumeID))
	h.Write([]byte{byte(len(uid))})
	h.Write([]byte(uid))
	var fp fingerprint
	copy(fp[:], h.Sum(nil))
	return fp
}

// ledger is an immutable, sorted set of fingerprints. The store swaps in a
// new one after each durable write, so readers need no lock.
type ledger struct{ fps []fingerprint }

func (l *ledger) contains(fp fingerprint) bool {
	_, ok := slices.BinarySearchFunc(l.fps, fp, compareFingerprint)
	return ok
}

// with returns the ledger holding l's fingerprints and add's, and whether
// that is more than l holds.
func (l *ledger) with(add []fingerprint) (*ledger, bool) {
	merged := append(slices.Clone(l.fps), add...)
	slices.SortFunc(merged, compareFingerprint)
	merged = slices.Compact(merged)
	return &ledger{fps: merged}, len(merged) != len(l.fps)
}

func compareFingerprint(a, b fingerprint) int { return bytes.Compare(a[:], b[:]) }

func (l *ledger) encode() []byte {
	b := make([]byte, 0, 4+1+4+16*len(l.fps)+4)
	b = append(b, ledgerMagic...)
	b = append(b, ledgerVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.fps)))
	for _, fp := range l.fps {
		b = append(b, fp[:]...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeLedger parses a ledger file. Every error wraps ErrCorruptMark; it
// never panics, whatever the input.
func decodeLedger(data []byte) (*ledger, error) {
	corrupt := func(format string, args ...any) (*ledger, error) {
		return nil, fmt.Errorf("%w: ledger: %s", ErrCorruptMark, fmt.Sprintf(format, args...))
	}
	payload, err := openEnvelope(data, ledgerMagic, ledgerVersion)
	if err != nil {
		return corrupt("%v", err)
	}
	r := reader{b: payload}
	count := uint64(r.u32())
	if r.short || count*16 != uint64(len(r.b)) {
		return corrupt("%d fingerprints announced, %d bytes present", count, len(r.b))
	}
	l := &ledger{fps: make([]fingerprint, count)}
	for i := range l.fps {
		copy(l.fps[i][:], r.take(16))
		if i > 0 && compareFingerprint(l.fps[i-1], l.fps[i]) >= 0 {
			return corrupt("fingerprints not strictly ascending at entry %d", i)
		}
	}
	return l, nil
}

// ledgerHeaderLen is the length of the magic, the version and the count.
const ledgerHeaderLen = len(ledgerMagic) + 1 + 4

// salvageLedger returns every whole 16-byte record of a ledger file that
// does not decode, sorted and without duplicates, and the count its header
// announces (-1 if the file does not start with the ledger's magic and
// version). The format has one checksum for the whole file, so once it
// fails nothing tells a damaged record from an intact one: all are kept,
// because a damaged fingerprint can only refuse a lifecycle that never
// existed (fail closed), while dropping an intact one would let a retired
// lifecycle back in. Records start right after the header whatever the
// header says; a trailing partial record (the checksum of a whole file, or
// the cut of a truncated one) is not a record.
func salvageLedger(data []byte) (l *ledger, announced int64) {
	announced = -1
	if len(data) >= ledgerHeaderLen && string(data[:len(ledgerMagic)]) == ledgerMagic && data[len(ledgerMagic)] == ledgerVersion {
		announced = int64(binary.LittleEndian.Uint32(data[len(ledgerMagic)+1:]))
	}
	var fps []fingerprint
	for off := ledgerHeaderLen; off+16 <= len(data); off += 16 {
		var fp fingerprint
		copy(fp[:], data[off:off+16])
		fps = append(fps, fp)
	}
	l, _ = (&ledger{}).with(fps)
	return l, announced
}

// newerVersion reports the format version of a file that starts with
// magic but has a version byte above current: a file written by a later
// release, which this build must neither read nor replace.
func newerVersion(data []byte, magic string, current byte) (byte, bool) {
	if len(data) <= len(magic) || string(data[:len(magic)]) != magic {
		return 0, false
	}
	v := data[len(magic)]
	return v, v > current
}
