package fencing

import (
	"encoding/base32"
	"fmt"
	"strings"
)

// File names of marks.
//
// A volume ID may hold any bytes, so it cannot be used as a file name as it
// is: "/" and ".." would escape the directory, NUL cannot be stored, and on a
// case-insensitive filesystem "PVC-a" and "pvc-a" would be one file. FileName
// maps every valid volume ID to a name that
//
//   - uses only the bytes a-z, 0-9, '-', '_' and '.', so it needs no quoting,
//     cannot traverse, and no two names differ only in letter case (marks
//     are safe on case-insensitive and case-folding filesystems);
//   - starts with "v." or "b.", so it is never ".", ".." or a hidden file,
//     and never collides with the ledger or a renameio temporary file
//     (".<name><digits>");
//   - is at most maxNameLen bytes, so the temporary file renameio creates
//     beside it (one dot and up to 19 digits more) still fits NAME_MAX (255);
//   - is injective and reversible: VolumeIDFromFileName returns the volume
//     ID, and accepts only names FileName produces (canonical form), so two
//     names never denote one volume.
//
// Readable form, used when it fits: "v." followed by the volume ID with
// a-z, 0-9 and '-' kept and every other byte written as '_' and two
// lower-case hex digits ("pvc-1" -> "v.pvc-1", "PVC/1" -> "v._50_56_43_2f1").
// Otherwise "b." followed by the volume ID in unpadded lower-case base32
// (RFC 4648 alphabet, lower-cased): at most 205 characters for 128 bytes.
const (
	readablePrefix = "v."
	base32Prefix   = "b."
	maxNameLen     = 255 - 1 - 19
	hexDigits      = "0123456789abcdef"
)

var nameBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func keptByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
}

// FileName returns the name of volume id's mark file within the store's
// directory. It fails only for an invalid volume ID (see ValidateVolumeID).
func FileName(id string) (string, error) {
	if err := ValidateVolumeID(id); err != nil {
		return "", err
	}
	n := len(readablePrefix)
	for i := 0; i < len(id); i++ {
		if keptByte(id[i]) {
			n++
		} else {
			n += 3
		}
	}
	if n > maxNameLen {
		return base32Prefix + nameBase32.EncodeToString([]byte(id)), nil
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(readablePrefix)
	for i := 0; i < len(id); i++ {
		if c := id[i]; keptByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String(), nil
}

// VolumeIDFromFileName reverses FileName. It fails for every name FileName
// does not produce, including names of other files in the directory.
func VolumeIDFromFileName(name string) (string, error) {
	var id string
	switch {
	case strings.HasPrefix(name, readablePrefix):
		s := name[len(readablePrefix):]
		b := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			c := s[i]
			switch {
			case keptByte(c):
				b = append(b, c)
			case c == '_' && i+2 < len(s) && isLowerHex(s[i+1]) && isLowerHex(s[i+2]):
				b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
				i += 2
			default:
				return "", fmt.Errorf("%q is not a mark file name: byte %q at offset %d", name, c, len(readablePrefix)+i)
			}
		}
		id = string(b)
	case strings.HasPrefix(name, base32Prefix):
		b, err := nameBase32.DecodeString(name[len(base32Prefix):])
		if err != nil {
			return "", fmt.Errorf("%q is not a mark file name: %w", name, err)
		}
		id = string(b)
	default:
		return "", fmt.Errorf("%q is not a mark file name", name)
	}
	// Only the canonical name of an ID is accepted: "_61" for "a", a base32
	// name for an ID whose readable name fits, or base32 with stray trailing
	// bits would otherwise be a second name for one volume.
	if canonical, err := FileName(id); err != nil || canonical != name {
		return "", fmt.Errorf("%q is not a mark file name (not in canonical form)", name)
	}
	return id, nil
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
