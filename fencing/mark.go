package fencing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"time"
)

// Phase is the state of the lifecycle a mark records.
type Phase uint8

const (
	// PhaseActive: the mark's lifecycle may still change the volume.
	PhaseActive Phase = 1
	// PhaseEnded: the mark's lifecycle ended (a tombstone). A request from
	// a UID the mark does not know starts a new lifecycle.
	PhaseEnded Phase = 2
)

func (p Phase) String() string {
	switch p {
	case PhaseActive:
		return "active"
	case PhaseEnded:
		return "ended"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Mark is the durable fencing state of one volume.
type Mark struct {
	// Phase says whether the lifecycle UID is active or has ended.
	Phase Phase
	// UID is the lifecycle that holds the volume, or the one that ended
	// last.
	UID string
	// Generation is the highest generation accepted for UID.
	Generation uint64
	// History lists lifecycles of this volume that have ended, oldest
	// first, so that none of them is ever admitted again. When Phase is
	// PhaseEnded its last entry is UID. The store keeps at most
	// Options.HistoryLimit entries and moves older ones to its ledger of
	// retired lifecycles.
	History []EndedLifecycle
}

// EndedLifecycle is a lifecycle that ended on a volume, and when.
type EndedLifecycle struct {
	UID string
	At  time.Time
}

func (m *Mark) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q@%d", m.Phase, m.UID, m.Generation)
	if len(m.History) > 0 {
		b.WriteString(" ended:")
		for _, e := range m.History {
			fmt.Fprintf(&b, " %q", e.UID)
		}
	}
	return b.String()
}

func (m *Mark) clone() *Mark {
	c := *m
	c.History = append([]EndedLifecycle(nil), m.History...)
	return &c
}

// endedAt returns when the mark's lifecycle ended; ok is false unless the
// phase is PhaseEnded.
func (m *Mark) endedAt() (at time.Time, ok bool) {
	if m.Phase != PhaseEnded || len(m.History) == 0 {
		return time.Time{}, false
	}
	return m.History[len(m.History)-1].At, true
}

// ErrCorruptMark is wrapped by every error about a mark or ledger file whose
// bytes do not decode: a bad magic, version, checksum, length or field. The
// store fails closed on such a file: it refuses every request for the
// volume (ReasonMarkUnreadable) and never overwrites or removes the file.
var ErrCorruptMark = errors.New("corrupt fencing mark")

// On-disk format of a mark, version 1, integers little-endian:
//
//	"PCFM" | version u8 | phase u8 | generation u64
//	| len u8 | volume ID | len u8 | UID
//	| count u16 | count × (len u8 | UID | ended-at i64 Unix nanoseconds)
//	| CRC-32C (Castagnoli) of all preceding bytes, u32
//
// The volume ID is stored so that a file renamed or copied under another
// volume's name is detected instead of silently fencing the wrong volume.
// The checksum catches torn or bit-rotted files; renameio's atomic replace
// already rules out torn writes on a crash, so a checksum failure means the
// disk or an outside writer damaged the file.
const (
	markMagic      = "PCFM"
	markVersion    = 1
	maxHistory     = 1024
	maxMarkFileLen = 4 + 1 + 1 + 8 + 1 + MaxVolumeIDLen + 1 + MaxUIDLen + 2 + maxHistory*(1+MaxUIDLen+8) + 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeMark returns the file contents for volume id's mark m.
func encodeMark(id string, m *Mark) ([]byte, error) {
	if err := ValidateVolumeID(id); err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return appendMark(id, m), nil
}

// appendMark encodes m as volume id's mark file, unchecked: encodeMark
// validates first.
func appendMark(id string, m *Mark) []byte {
	n := 4 + 1 + 1 + 8 + 1 + len(id) + 1 + len(m.UID) + 2 + 4
	for _, e := range m.History {
		n += 1 + len(e.UID) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, markMagic...)
	b = append(b, markVersion, byte(m.Phase))
	b = binary.LittleEndian.AppendUint64(b, m.Generation)
	b = appendString8(b, id)
	b = appendString8(b, m.UID)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(m.History)))
	for _, e := range m.History {
		b = appendString8(b, e.UID)
		b = binary.LittleEndian.AppendUint64(b, uint64(e.At.UnixNano()))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func appendString8(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

// decodeMark parses a mark file. Every error wraps ErrCorruptMark. It never
// panics, whatever the input (see FuzzDecodeMark).
func decodeMark(data []byte) (id string, m *Mark, err error) {
	corrupt := func(format string, args ...any) (string, *Mark, error) {
		return "", nil, fmt.Errorf("%w: %s", ErrCorruptMark, fmt.Sprintf(format, args...))
	}
	if len(data) > maxMarkFileLen {
		return corrupt("%d bytes, more than a mark can hold (%d)", len(data), maxMarkFileLen)
	}
	payload, err := openEnvelope(data, markMagic, markVersion)
	if err != nil {
		return corrupt("%v", err)
	}
	r := reader{b: payload}
	m = &Mark{Phase: Phase(r.u8())}
	m.Generation = r.u64()
	id = r.string8()
	m.UID = r.string8()
	count := int(r.u16())
	if count > maxHistory {
		return corrupt("history of %d lifecycles, more than %d", count, maxHistory)
	}
	for i := 0; i < count && !r.short; i++ {
		uid := r.string8()
		at := int64(r.u64())
		m.History = append(m.History, EndedLifecycle{UID: uid, At: time.Unix(0, at)})
	}
	switch {
	case r.short:
		return corrupt("truncated")
	case len(r.b) != 0:
		return corrupt("%d trailing bytes", len(r.b))
	}
	if err := ValidateVolumeID(id); err != nil {
		return corrupt("%v", err)
	}
	if err := m.validate(); err != nil {
		return corrupt("%v", err)
	}
	return id, m, nil
}

// openEnvelope checks the frame shared by marks and the ledger (magic,
// version byte, trailing CRC-32C) and returns the payload between them.
func openEnvelope(data []byte, magic string, version byte) ([]byte, error) {
	if len(data) < len(magic)+1+4 || string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("bad magic, not a %q file", magic)
	}
	if v := data[len(magic)]; v != version {
		return nil, fmt.Errorf("unsupported version %d (this build reads version %d)", v, version)
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	return body[len(magic)+1:], nil
}

// validate checks the invariants every stored mark keeps.
func (m *Mark) validate() error {
	if m.Phase != PhaseActive && m.Phase != PhaseEnded {
		return fmt.Errorf("invalid phase %d", m.Phase)
	}
	if err := validateUID(m.UID); err != nil {
		return err
	}
	if len(m.History) > maxHistory {
		return fmt.Errorf("history of %d lifecycles, more than %d", len(m.History), maxHistory)
	}
	seen := make(map[string]bool, len(m.History))
	for _, e := range m.History {
		if err := validateUID(e.UID); err != nil {
			return fmt.Errorf("history: %w", err)
		}
		if seen[e.UID] {
			return fmt.Errorf("history lists lifecycle %q twice", e.UID)
		}
		seen[e.UID] = true
	}
	switch {
	case m.Phase == PhaseActive && seen[m.UID]:
		return fmt.Errorf("active lifecycle %q is also listed as ended", m.UID)
	case m.Phase == PhaseEnded && (len(m.History) == 0 || m.History[len(m.History)-1].UID != m.UID):
		return fmt.Errorf("ended lifecycle %q is not the last entry of the history", m.UID)
	}
	return nil
}

// reader consumes a byte slice; reading past its end sets short and yields
// zeros, so decoders check once at the end instead of after every field.
type reader struct {
	b     []byte
	short bool
}

func (r *reader) take(n int) []byte {
	if r.short || n > len(r.b) {
		r.short = true
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u8() uint8       { return r.take(1)[0] }
func (r *reader) u16() uint16     { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *reader) u32() uint32     { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *reader) u64() uint64     { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *reader) string8() string { return string(r.take(int(r.u8()))) }

// Salvage is what a best-effort reading of a damaged mark file found:
// the fields of the format read in order, with the checksum and the
// invariants left unchecked. Nothing in it is verified; it serves an
// operator comparing the file with the cluster, and ResetMark, which only
// ever uses it to refuse more (see ResetMark).
type Salvage struct {
	// VolumeID is the volume the file says it belongs to.
	VolumeID string
	// Phase, UID and Generation are the mark's fields as read; Phase may
	// be neither PhaseActive nor PhaseEnded.
	Phase      Phase
	UID        string
	Generation uint64
	// History is as much of the list of ended lifecycles as could be read.
	History []EndedLifecycle
	// Complete reports that every field was read and nothing trailed them.
	Complete bool
	// ChecksumOK reports that the file's CRC-32C matched: the bytes are
	// the ones written, and the damage is in what they say (another
	// volume's ID, an invalid field), not in the bytes.
	ChecksumOK bool
}

// salvageMark reads what it can of a mark file that does not decode,
// field by field, and stops at the first field the file cuts short. It
// returns nil when the file does not start with the magic and version of
// this format: then its fields cannot be located at all.
func salvageMark(data []byte) *Salvage {
	head := len(markMagic) + 1
	if len(data) < head || string(data[:len(markMagic)]) != markMagic || data[len(markMagic)] != markVersion {
		return nil
	}
	sv := &Salvage{}
	body := data[head:]
	hasSum := len(body) >= 4
	if hasSum {
		sum := binary.LittleEndian.Uint32(body[len(body)-4:])
		sv.ChecksumOK = crc32.Checksum(data[:len(data)-4], castagnoli) == sum
		body = body[:len(body)-4]
	}
	r := reader{b: body}
	phase, gen := r.u8(), r.u64()
	if r.short {
		return sv
	}
	sv.Phase, sv.Generation = Phase(phase), gen
	if sv.VolumeID = r.string8(); r.short {
		sv.VolumeID = ""
		return sv
	}
	if sv.UID = r.string8(); r.short {
		sv.UID = ""
		return sv
	}
	count := int(r.u16())
	if r.short {
		return sv
	}
	for i := 0; i < count && i < maxHistory; i++ {
		uid := r.string8()
		at := int64(r.u64())
		if r.short {
			return sv
		}
		sv.History = append(sv.History, EndedLifecycle{UID: uid, At: time.Unix(0, at)})
	}
	sv.Complete = hasSum && count <= maxHistory && len(r.b) == 0
	return sv
}
