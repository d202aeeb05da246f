package lvm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// lvFields are the columns of every lvs of this package.
const lvFields = "lv_name,lv_size,lv_tags,lv_attr,pool_lv,lv_dm_path,lv_kernel_major,lv_kernel_minor,vg_extent_size"

// snapFields are the columns of the lvs of snapshots and of the volumes
// made from them: lvFields, the LV's origin (empty once the origin is
// removed: thin snapshots do not depend on it) and its creation time.
const snapFields = lvFields + ",origin,lv_time"

// lvTimeLayout is how lvs prints lv_time with the report/time_format
// "%Y-%m-%d %T %z" that report pins.
const lvTimeLayout = "2006-01-02 15:04:05 -0700"

// vgFields are the columns of every vgs of this package.
const vgFields = "vg_name,vg_size,vg_free,vg_extent_size"

// report is LVM's JSON report (--reportformat json). Every value is a
// string; sizes are bytes with --units b --nosuffix.
type report struct {
	Report []struct {
		LV []lvRow `json:"lv"`
		VG []vgRow `json:"vg"`
	} `json:"report"`
}

type lvRow struct {
	Name       string `json:"lv_name"`
	Size       string `json:"lv_size"`
	Tags       string `json:"lv_tags"`
	Attr       string `json:"lv_attr"`
	PoolLV     string `json:"pool_lv"`
	DMPath     string `json:"lv_dm_path"`
	Major      string `json:"lv_kernel_major"`
	Minor      string `json:"lv_kernel_minor"`
	ExtentSize string `json:"vg_extent_size"`
	// Only in reports of snapFields.
	Origin string `json:"origin"`
	Time   string `json:"lv_time"`
}

type vgRow struct {
	Name       string `json:"vg_name"`
	Size       string `json:"vg_size"`
	Free       string `json:"vg_free"`
	ExtentSize string `json:"vg_extent_size"`
}

// lv is a parsed lvRow.
type lv struct {
	name       string
	size       int64
	tags       []string
	attr       string
	poolLV     string
	dmPath     string
	major      int64 // -1 when inactive
	minor      int64
	extentSize int64
	origin     string
	created    time.Time // zero unless reported
}

// owner returns the volume ID in the LV's ownership tag, or "".
func (l *lv) owner() string { return l.tagged(TagPrefix) }

// tagged returns the suffix of the LV's first tag with prefix, or "".
func (l *lv) tagged(prefix string) string {
	for _, t := range l.tags {
		if v, ok := strings.CutPrefix(t, prefix); ok {
			return v
		}
	}
	return ""
}

// thinVolume reports whether the LV is a thin volume (lv_attr 'V').
func (l *lv) thinVolume() bool { return strings.HasPrefix(l.attr, "V") }

// thinPool reports whether the LV is a thin pool (lv_attr 't').
func (l *lv) thinPool() bool { return strings.HasPrefix(l.attr, "t") }

// zeroes reports whether a thin pool zeroes the chunks it provisions before
// their first use: lv_attr's eighth character is 'z' (lvs(8), "Newly-
// allocated data blocks are overwritten with blocks of (z)eroes before
// use"), '-' after --zero n. lv_attr rather than the zero field: zero is a
// segment field, and one segment field in -o makes lvs report a row per
// segment instead of one per LV.
func (l *lv) zeroes() bool { return len(l.attr) > 7 && l.attr[7] == 'z' }

func parseReport(out []byte) (*report, error) {
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("lvm report: %w", err)
	}
	return &r, nil
}

func parseLVs(out []byte) ([]lv, error) {
	r, err := parseReport(out)
	if err != nil {
		return nil, err
	}
	var lvs []lv
	for _, part := range r.Report {
		for _, row := range part.LV {
			n, err := ints(row.Size, row.Major, row.Minor, row.ExtentSize)
			if err != nil {
				return nil, fmt.Errorf("lvs %s: %w", row.Name, err)
			}
			// Byte counts are never negative, nor the device numbers below
			// -1 (inactive): a negative size would make room in the thin
			// pool's overcommit rule.
			if n[0] < 0 || n[1] < -1 || n[2] < -1 || n[3] <= 0 {
				return nil, fmt.Errorf("lvs %s: size %d, device %d:%d or extent size %d out of range", row.Name, n[0], n[1], n[2], n[3])
			}
			l := lv{name: row.Name, size: n[0], attr: row.Attr, poolLV: row.PoolLV, dmPath: row.DMPath,
				major: n[1], minor: n[2], extentSize: n[3], origin: row.Origin}
			if row.Time != "" {
				if l.created, err = time.Parse(lvTimeLayout, row.Time); err != nil {
					return nil, fmt.Errorf("lvs %s: lv_time: %w", row.Name, err)
				}
			}
			if row.Tags != "" {
				l.tags = strings.Split(row.Tags, ",")
			}
			lvs = append(lvs, l)
		}
	}
	return lvs, nil
}

// vg is a parsed vgRow.
type vg struct {
	name                   string
	size, free, extentSize int64
}

func parseVG(out []byte) (*vg, error) {
	r, err := parseReport(out)
	if err != nil {
		return nil, err
	}
	var rows []vgRow
	for _, part := range r.Report {
		rows = append(rows, part.VG...)
	}
	if len(rows) != 1 {
		return nil, fmt.Errorf("vgs: %d volume groups in %q, want 1", len(rows), out)
	}
	n, err := ints(rows[0].Size, rows[0].Free, rows[0].ExtentSize)
	if err != nil {
		return nil, fmt.Errorf("vgs %s: %w", rows[0].Name, err)
	}
	if n[0] < 0 || n[1] < 0 || n[2] <= 0 {
		return nil, fmt.Errorf("vgs %s: size %d, free %d or extent size %d out of range", rows[0].Name, n[0], n[1], n[2])
	}
	return &vg{name: rows[0].Name, size: n[0], free: n[1], extentSize: n[2]}, nil
}

func ints(s ...string) ([]int64, error) {
	n := make([]int64, len(s))
	for i, v := range s {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", v, err)
		}
		n[i] = x
	}
	return n, nil
}
