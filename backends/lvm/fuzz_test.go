package lvm

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pillar-csi/pillar-csi/backends/command/commandtest"
)

// reportSeeds adds the standard output of every captured lvm command cmd
// (lvs or vgs) under testdata to f's corpus: what LVM 2.03 really prints.
func reportSeeds(f *testing.F, cmd string) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		s := commandtest.Load(f, p)
		if len(s.Argv) > 1 && s.Argv[0] == "lvm" && s.Argv[1] == cmd && s.ExitCode == 0 {
			f.Add([]byte(s.Stdout))
			n++
		}
	}
	if n == 0 {
		f.Fatalf("no captured %s output under testdata", cmd)
	}
}

// reportRows counts the rows of kind ("lv" or "vg") in an LVM report.
func reportRows(t *testing.T, out []byte, kind string) int {
	t.Helper()
	r, err := parseReport(out)
	if err != nil {
		t.Fatalf("parseReport refuses a report its callers accepted: %v", err)
	}
	n := 0
	for _, part := range r.Report {
		if kind == "lv" {
			n += len(part.LV)
		} else {
			n += len(part.VG)
		}
	}
	return n
}

// encodeReport renders rows as lvs and vgs do with --reportformat json.
func encodeReport(t *testing.T, kind string, rows []map[string]string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"report": []map[string]any{{kind: rows}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// FuzzParseLVs feeds the lvs report parser arbitrary output. What it
// accepts is JSON with one parsed LV per row, whose byte counts are not
// negative (the kernel device numbers are -1 for an inactive LV, never
// less), whose tags are the row's lv_tags, and which reads back the same
// when lvs prints it again. The sizes feed the thin pool's overcommit
// rule and RoundUp: a negative one would make room that is not there.
func FuzzParseLVs(f *testing.F) {
	reportSeeds(f, "lvs")
	f.Add([]byte(`{"report":[{"lv":[{"lv_name":"a","lv_size":"-4194304","lv_tags":"","lv_attr":"Vwi-a-tz--","pool_lv":"thinpool","lv_dm_path":"/dev/mapper/vg0-a","lv_kernel_major":"254","lv_kernel_minor":"4","vg_extent_size":"4194304"}]}]}`))
	f.Add([]byte(`{"report":[{"lv":[{"lv_name":"a","lv_size":"0","lv_tags":",,","lv_attr":"","pool_lv":"","lv_dm_path":"","lv_kernel_major":"-1","lv_kernel_minor":"-1","vg_extent_size":"0"}]}]}`))
	f.Add([]byte(`{"report":[{"lv":[]},{"lv":[{"LV_NAME":"x"}]}]}`))
	f.Add([]byte(`{"report":[{"lv":[{"lv_size":"9223372036854775808"}]}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, out []byte) {
		lvs, err := parseLVs(out)
		if err != nil {
			if lvs != nil {
				t.Fatalf("parseLVs returned %d LVs with error %v", len(lvs), err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("accepted %q, which is not JSON", out)
		}
		if n := reportRows(t, out, "lv"); len(lvs) != n {
			t.Fatalf("%d LVs from %d rows", len(lvs), n)
		}
		rows := make([]map[string]string, len(lvs))
		for i, l := range lvs {
			if l.size < 0 || l.extentSize <= 0 || l.major < -1 || l.minor < -1 {
				t.Fatalf("accepted LV %q with size %d, extent size %d, device %d:%d", l.name, l.size, l.extentSize, l.major, l.minor)
			}
			if l.tags != nil && slices.Equal(l.tags, []string{""}) {
				t.Fatalf("LV %q: empty lv_tags became one empty tag", l.name)
			}
			if id := l.owner(); id != "" && !slices.Contains(l.tags, TagPrefix+id) {
				t.Fatalf("LV %q: owner %q is not one of its tags %q", l.name, id, l.tags)
			}
			rows[i] = map[string]string{
				"lv_name": l.name, "lv_size": itoa(l.size), "lv_tags": strings.Join(l.tags, ","), "lv_attr": l.attr,
				"pool_lv": l.poolLV, "lv_dm_path": l.dmPath, "lv_kernel_major": itoa(l.major),
				"lv_kernel_minor": itoa(l.minor), "vg_extent_size": itoa(l.extentSize),
			}
		}
		again, err := parseLVs(encodeReport(t, "lv", rows))
		if err != nil || !reflect.DeepEqual(again, lvs) {
			t.Fatalf("the LVs printed again parse as %+v, %v; want %+v", again, err, lvs)
		}
	})
}

// FuzzParseVG feeds the vgs report parser arbitrary output. What it
// accepts is JSON with exactly one volume group, whose size, free space
// and extent size are byte counts (Capacity reports the first two, and
// the extent is the rounding unit of every linear LV), and which reads
// back the same when vgs prints it again.
func FuzzParseVG(f *testing.F) {
	reportSeeds(f, "vgs")
	f.Add([]byte(`{"report":[{"vg":[{"vg_name":"vg0","vg_size":"1069547520","vg_free":"-1","vg_extent_size":"4194304"}]}]}`))
	f.Add([]byte(`{"report":[{"vg":[{"vg_name":"vg0","vg_size":"1","vg_free":"1","vg_extent_size":"0"}]}]}`))
	f.Add([]byte(`{"report":[{"vg":[]},{"vg":[{"vg_name":"a"},{"vg_name":"b"}]}]}`))
	f.Add([]byte(`{"report":[{"vg":[{"vg_name":"vg0","vg_size":"+5","vg_free":"0","vg_extent_size":"512"}]}]}`))
	f.Fuzz(func(t *testing.T, out []byte) {
		g, err := parseVG(out)
		if (g == nil) == (err == nil) {
			t.Fatalf("parseVG = %+v, %v", g, err)
		}
		if err != nil {
			return
		}
		if n := reportRows(t, out, "vg"); n != 1 {
			t.Fatalf("accepted a report of %d volume groups", n)
		}
		if g.size < 0 || g.free < 0 || g.extentSize <= 0 {
			t.Fatalf("accepted volume group %q with size %d, free %d, extent size %d", g.name, g.size, g.free, g.extentSize)
		}
		again, err := parseVG(encodeReport(t, "vg", []map[string]string{{
			"vg_name": g.name, "vg_size": itoa(g.size), "vg_free": itoa(g.free), "vg_extent_size": itoa(g.extentSize),
		}}))
		if err != nil || *again != *g {
			t.Fatalf("the volume group printed again parses as %+v, %v; want %+v", again, err, *g)
		}
	})
}

// FuzzZeroFrom reads the zero tag among arbitrary lv_tags. A tag is only
// ever written by zeroTag, and zeroLV removes the tag zeroTag(from) when
// it is done: an offset read from any other spelling ("+0", "0512")
// would be zeroed from, yet its tag never removed, and the volume's
// data zeroed again on every later Create retry and Expand. So an
// offset is read only from a tag that zeroTag writes, the first one.
func FuzzZeroFrom(f *testing.F) {
	f.Add(TagPrefix + "pvc-1," + zeroTagPrefix + "16777216")
	f.Add(zeroTagPrefix + "0")
	f.Add(zeroTagPrefix + "+0")
	f.Add(zeroTagPrefix + "0512," + zeroTagPrefix + "1024")
	f.Add(zeroTagPrefix + "-4," + zeroTagPrefix + "x")
	f.Add(zeroTagPrefix + "9223372036854775808")
	f.Add("")
	f.Fuzz(func(t *testing.T, tags string) {
		l := &lv{tags: strings.Split(tags, ",")}
		from, ok := l.zeroFrom()
		var want int64
		found := false
		for _, tag := range l.tags {
			v, is := strings.CutPrefix(tag, zeroTagPrefix)
			if n, err := strconv.ParseInt(v, 10, 64); is && err == nil && n >= 0 && tag == zeroTag(n) {
				want, found = n, true
				break
			}
		}
		if ok != found || from != want {
			t.Fatalf("tags %q: zeroFrom = %d, %v; want %d, %v", l.tags, from, ok, want, found)
		}
	})
}
