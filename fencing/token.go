package fencing

import (
	"fmt"
	"strconv"
)

// Limits on the identifiers a request carries.
const (
	// MaxVolumeIDLen is the CSI specification's limit on a volume ID
	// ("The value of this field MUST NOT exceed 128 bytes", CreateVolume
	// response). A volume ID may hold any bytes; the store maps it to a file
	// name (see FileName).
	MaxVolumeIDLen = 128

	// MaxUIDLen bounds a lifecycle UID. Kubernetes object UIDs are 36-byte
	// RFC 4122 strings; the bound leaves room for other issuers while keeping
	// a mark small.
	MaxUIDLen = 128
)

// Token identifies the sender of a mutating request: the lifecycle it
// belongs to and how far the controller had advanced that lifecycle when it
// sent the request.
//
// The zero Token means "no token" and is always rejected
// (ReasonMissingToken).
type Token struct {
	// UID is the lifecycle identity: in pillar-csi the metadata.uid of the
	// volume's PillarVolumeState. A new object for the same volume ID gets a
	// new, random UID, which is how the store tells lifecycles apart. UID
	// must be 1..MaxUIDLen bytes of printable ASCII without spaces
	// (0x21..0x7e).
	UID string

	// Generation is the publicationGeneration the controller had written
	// (by compare-and-swap) when it sent the request. Within one lifecycle a
	// larger generation is newer; an equal one is a retry.
	Generation uint64
}

// IsZero reports whether t is the zero Token, i.e. no token at all.
func (t Token) IsZero() bool { return t == Token{} }

// String formats t for logs as uid@generation.
func (t Token) String() string {
	if t.IsZero() {
		return "<no token>"
	}
	return strconv.Quote(t.UID) + "@" + strconv.FormatUint(t.Generation, 10)
}

// Validate reports why t cannot be used, or nil. The zero Token is reported
// as missing, anything else that breaks the rules on UID as malformed.
func (t Token) Validate() error {
	if t.IsZero() {
		return ErrMissingToken
	}
	if err := validateUID(t.UID); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}

func validateUID(uid string) error {
	if uid == "" {
		return fmt.Errorf("empty lifecycle UID")
	}
	if len(uid) > MaxUIDLen {
		return fmt.Errorf("lifecycle UID is %d bytes, longer than %d", len(uid), MaxUIDLen)
	}
	for i := 0; i < len(uid); i++ {
		if c := uid[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("lifecycle UID %q has byte %#02x at offset %d; only printable ASCII without spaces is allowed", uid, c, i)
		}
	}
	return nil
}

// ValidateVolumeID reports why id cannot name a volume, or nil: a volume ID
// is 1..MaxVolumeIDLen bytes, any bytes.
func ValidateVolumeID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty volume ID", ErrMalformed)
	case len(id) > MaxVolumeIDLen:
		return fmt.Errorf("%w: volume ID is %d bytes, longer than %d", ErrMalformed, len(id), MaxVolumeIDLen)
	}
	return nil
}

// Kind says what a request does to its volume's lifecycle.
type Kind uint8

const (
	// KindMutate is any call that changes a volume's resources within its
	// lifecycle: create, export, publish, unpublish, expand.
	KindMutate Kind = iota + 1

	// KindEnd is the call that ends the lifecycle: DeleteVolume. An accepted
	// KindEnd leaves a tombstone; no KindMutate of that lifecycle is
	// accepted afterwards.
	KindEnd
)

func (k Kind) String() string {
	switch k {
	case KindMutate:
		return "mutate"
	case KindEnd:
		return "end"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

func (k Kind) valid() bool { return k == KindMutate || k == KindEnd }
