package zfs

import (
	"fmt"
	"strconv"
	"strings"
)

// parseRows splits the output of zfs list -H into rows of n tab-separated
// fields.
func parseRows(out []byte, n int) ([][]string, error) {
	var rows [][]string
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != n {
			return nil, fmt.Errorf("zfs list: %d fields in %q, want %d", len(f), line, n)
		}
		rows = append(rows, f)
	}
	return rows, nil
}

// ints parses exact byte counts (zfs -p), which are never negative.
func ints(fields []string) ([]int64, error) {
	n := make([]int64, len(fields))
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("zfs list: number %q: %w", f, err)
		}
		if v < 0 {
			return nil, fmt.Errorf("zfs list: byte count %q is negative", f)
		}
		n[i] = v
	}
	return n, nil
}

// parseVolumes parses zfs list -Hp -o volumeProps.
func parseVolumes(out []byte) ([]zvol, error) {
	rows, err := parseRows(out, 6)
	if err != nil {
		return nil, err
	}
	zs := make([]zvol, 0, len(rows))
	for _, r := range rows {
		n, err := ints(r[1:4])
		if err != nil {
			return nil, err
		}
		zs = append(zs, zvol{name: r[0], volSize: n[0], volBlockSize: n[1], refReservation: n[2], volMode: r[4], owner: r[5]})
	}
	return zs, nil
}
