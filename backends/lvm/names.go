package lvm

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// TagPrefix starts the tag that marks an LV as owned by a volume; the
// volume ID follows. Only characters every LVM release allows in tags.
const TagPrefix = "pillar-csi.io_volume-id_"

// maxDMName is DM_NAME_LEN (128) without the NUL: the longest
// device-mapper name, "VG-LV" with every '-' doubled.
const maxDMName = 127

// layerReserve keeps room for the longest suffix LVM appends to an LV's
// device-mapper name for internal layers ("-tpool"; "-real" and "-cow" for
// snapshot origins), so that a later snapshot or conversion cannot fail on
// the name's length.
const layerReserve = len("-tpool")

// hashedPrefix starts the LV name of an ID that cannot be used as one. '_'
// never occurs in a volume ID, so a hashed name never equals a readable one.
const hashedPrefix = "pillar_"

// reservedPrefixes are LV name prefixes lvcreate refuses.
var reservedPrefixes = []string{"snapshot", "pvmove"}

// LVName is the LV name of volume id in volume group vg: id itself when
// LVM accepts it as a name there, else "pillar_" and 32 hex digits of the
// ID's SHA-256. Volume IDs never contain '_', so LVM's reserved name parts
// (_tmeta, _rimage, ...) cannot occur in them.
func LVName(vg, id string) string {
	readable := dmNameLen(vg)+1+dmNameLen(id)+layerReserve <= maxDMName
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(id, p) {
			readable = false
		}
	}
	if readable {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashedPrefix + hex.EncodeToString(sum[:16])
}

// dmNameLen is the length of s in a device-mapper name: '-' is doubled.
func dmNameLen(s string) int { return len(s) + strings.Count(s, "-") }

// dmPath is the node LVM makes for the active LV vg/lv, the path lvs
// reports as lv_dm_path: /dev/mapper/VG-LV with each '-' of the two names
// doubled.
func dmPath(vg, lv string) string {
	return "/dev/mapper/" + strings.ReplaceAll(vg, "-", "--") + "-" + strings.ReplaceAll(lv, "-", "--")
}
