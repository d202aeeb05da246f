package perfplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

const svgNS = "http://www.w3.org/2000/svg"

// doc is what the tests look at in a picture: its root element, the
// attributes of its series paths, and its text, decoded.
type doc struct {
	root  xml.StartElement
	paths []map[string]string
	text  []string
}

// parse decodes data as XML, failing the test if it is not well formed,
// and collects the parts of it the tests check.
func parse(t *testing.T, data []byte) doc {
	t.Helper()
	var d doc
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	depth := 0
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, data)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				if d.root.Name.Local != "" {
					t.Fatalf("second root element <%s>", tok.Name.Local)
				}
				d.root = tok.Copy()
			}
			depth++
			if tok.Name.Local == "text" {
				text.Reset()
			}
			if tok.Name.Local == "path" {
				attrs := map[string]string{}
				for _, a := range tok.Attr {
					attrs[a.Name.Local] = a.Value
				}
				if attrs["class"] == "series" {
					d.paths = append(d.paths, attrs)
				}
			}
		case xml.EndElement:
			depth--
			if tok.Name.Local == "text" {
				d.text = append(d.text, text.String())
			}
		case xml.CharData:
			text.Write(tok)
		}
	}
	if d.root.Name.Local == "" {
		t.Fatal("no root element")
	}
	return d
}

// render is WriteSVG's output for panels, failing the test on an error.
func render(t *testing.T, panels []Panel) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSVG(&b, panels); err != nil {
		t.Fatalf("WriteSVG: %v", err)
	}
	return b.Bytes()
}

func secs(ss ...float64) []time.Duration {
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = time.Duration(s * float64(time.Second))
	}
	return ds
}

func twoPanels() []Panel {
	return []Panel{
		{Title: "50 claims at once: claims Bound", Series: []Series{
			{Name: "pillar-csi", Times: secs(3, 1.5, 362, 40)},
			{Name: "floor", Times: secs(0.5, 1, 2)},
			{Name: "local-path", Times: nil},
		}},
		{Title: "50 claims at once: pods Running", Series: []Series{
			{Name: "pillar-csi", Times: secs(10, 20)},
		}},
	}
}

func TestWriteSVGDocument(t *testing.T) {
	d := parse(t, render(t, twoPanels()))
	if d.root.Name.Local != "svg" || d.root.Name.Space != svgNS {
		t.Fatalf("root is {%s}%s, want {%s}svg", d.root.Name.Space, d.root.Name.Local, svgNS)
	}
	attrs := map[string]string{}
	for _, a := range d.root.Attr {
		attrs[a.Name.Local] = a.Value
	}
	want := map[string]string{
		"width":       "960",
		"height":      "640", // two panels of 320
		"viewBox":     "0 0 960 640",
		"font-family": "sans-serif",
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("root %s = %q, want %q", k, attrs[k], v)
		}
	}
	if len(d.paths) != 4 {
		t.Errorf("%d series paths, want 4", len(d.paths))
	}
	for _, s := range []string{"seconds", "done", "50 claims at once: claims Bound", "50 claims at once: pods Running",
		"pillar-csi (4 in 362.0 s)", "floor (3 in 2.0 s)", "local-path (0)", "pillar-csi (2 in 20.0 s)",
		"0", "100", "500", // 362 s → the x axis ends at 500, in steps of 100
		"5", "10", "20", // the second panel's x axis, in steps of 5
	} {
		if !slices.Contains(d.text, s) {
			t.Errorf("no text %q in %q", s, d.text)
		}
	}
}

func TestSeriesStyles(t *testing.T) {
	d := parse(t, render(t, []Panel{{Title: "p", Series: []Series{
		{Name: "a", Times: secs(1)},
		{Name: "b", Times: secs(2)},
	}}}))
	if len(d.paths) != 2 {
		t.Fatalf("%d series paths, want 2", len(d.paths))
	}
	a, b := d.paths[0], d.paths[1]
	if a["stroke"] == "" || a["stroke"] == b["stroke"] {
		t.Errorf("strokes %q and %q, want two colours", a["stroke"], b["stroke"])
	}
	if a["stroke-dasharray"] == b["stroke-dasharray"] {
		t.Errorf("both dash patterns %q, want two", a["stroke-dasharray"])
	}
	if a["fill"] != "none" {
		t.Errorf("fill %q, want none", a["fill"])
	}
}

func TestStyleDistinct(t *testing.T) {
	seen := map[[2]string]int{}
	for i := range len(palette) * len(dashes) {
		c, d := style(i)
		if j, ok := seen[[2]string{c, d}]; ok {
			t.Fatalf("series %d and %d both %s %q", j, i, c, d)
		}
		seen[[2]string{c, d}] = i
	}
}

func TestSteps(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name  string
		times []time.Duration
		xmax  time.Duration
		want  []point
	}{
		{"ties", []time.Duration{5 * s, 2 * s, 1 * s, 2 * s}, 10 * s, []point{
			{0, 0}, {1 * s, 0}, {1 * s, 1}, {2 * s, 1}, {2 * s, 3}, {5 * s, 3}, {5 * s, 4}, {10 * s, 4},
		}},
		{"empty", nil, 1 * s, []point{{0, 0}, {1 * s, 0}}},
		{"at zero", []time.Duration{0, 0, 3 * s}, 5 * s, []point{
			{0, 0}, {0, 2}, {3 * s, 2}, {3 * s, 3}, {5 * s, 3},
		}},
		{"last at xmax", []time.Duration{2 * s}, 2 * s, []point{{0, 0}, {2 * s, 0}, {2 * s, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.times)
			got := steps(tc.times, tc.xmax)
			if !slices.Equal(got, tc.want) {
				t.Errorf("steps(%v, %v) =\n%v, want\n%v", tc.times, tc.xmax, got, tc.want)
			}
			if !slices.Equal(in, tc.times) {
				t.Errorf("steps reordered its input: %v, was %v", tc.times, in)
			}
		})
	}
}

// TestStepPath checks that the drawn path is the step line in panel
// coordinates: Times {1,2,2,5} s on a 0–5 s, 0–5 objects frame (the count
// axis's least end is 5).
func TestStepPath(t *testing.T) {
	d := parse(t, render(t, []Panel{{Title: "p", Series: []Series{{Name: "a", Times: secs(1, 2, 2, 5)}}}}))
	// x = 64 + t/5·560, y = 260 − n/5·220.
	want := "M64.00 260.00 L176.00 260.00 L176.00 216.00 L288.00 216.00 L288.00 128.00 L624.00 128.00 L624.00 84.00"
	if got := d.paths[0]["d"]; got != want {
		t.Errorf("path d =\n%s, want\n%s", got, want)
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want float64
	}{
		{362, 500}, // rounds up, never to the nearest (400)
		{0.7, 1},
		{10, 10},
		{1, 1},
		{0, 1},
		{-3, 1},
		{0.3, 0.5},
		{0.2, 0.2},
		{1000, 1000},
		{1000.001, 2000},
		{2.0001, 5},
		{50, 50},
		{51, 100},
		{0.001, 0.001},
		{4.9, 5},
	} {
		if got := niceCeil(tc.v).value(); got != tc.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want []string
	}{
		{0.7, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
		{362, []string{"0", "100", "200", "300", "400", "500"}},
		{20, []string{"0", "5", "10", "15", "20"}},
		{0.02, []string{"0", "0.005", "0.01", "0.015", "0.02"}},
		{5, []string{"0", "1", "2", "3", "4", "5"}},
	} {
		n := niceCeil(tc.v)
		var got []string
		for _, tk := range n.ticks() {
			got = append(got, tk.label)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ticks for %v = %q, want %q", tc.v, got, tc.want)
		}
	}
	// Every nice number from 1e-3 to 1e6 has 4–6 ticks from 0 to itself.
	for e := -3; e <= 6; e++ {
		for _, m := range []int{1, 2, 5} {
			n := nice{m, e}
			ts := n.ticks()
			if len(ts) < 4 || len(ts) > 6 || ts[0].v != 0 || ts[len(ts)-1].v != n.value() {
				t.Errorf("ticks of %v: %v", n.value(), ts)
			}
		}
	}
}

func TestEscaping(t *testing.T) {
	name := `a&b<c>"d'`
	data := render(t, []Panel{{Title: "T & <U>", Series: []Series{{Name: name, Times: secs(1.5, 0.5)}}}})
	if bytes.Contains(data, []byte(name)) || bytes.Contains(data, []byte("<U>")) {
		t.Fatalf("unescaped text in the output:\n%s", data)
	}
	d := parse(t, data)
	for _, s := range []string{"T & <U>", name + " (2 in 1.5 s)"} {
		if !slices.Contains(d.text, s) {
			t.Errorf("no text %q in %q", s, d.text)
		}
	}
}

func TestErrors(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, nil); err == nil {
		t.Error("no error for no panels")
	}
	if err := WriteSVG(&b, []Panel{}); err == nil {
		t.Error("no error for an empty panel list")
	}
	err := WriteSVG(&b, []Panel{{Title: "p", Series: []Series{
		{Name: "fine", Times: secs(1)},
		{Name: "broken-series", Times: []time.Duration{time.Second, -time.Millisecond}},
	}}})
	if err == nil || !strings.Contains(err.Error(), "broken-series") {
		t.Errorf("negative time: error %v, want one naming broken-series", err)
	}
	if b.Len() != 0 {
		t.Errorf("wrote %d bytes despite the errors", b.Len())
	}
	errWrite := errors.New("disk full")
	if err := WriteSVG(failWriter{errWrite}, twoPanels()); !errors.Is(err, errWrite) {
		t.Errorf("writer error: got %v, want %v", err, errWrite)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestDeterministic(t *testing.T) {
	first := render(t, twoPanels())
	if again := render(t, twoPanels()); !bytes.Equal(first, again) {
		t.Error("two renderings of the same input differ")
	}
	// The order of a series' times does not matter either.
	shuffled := twoPanels()
	slices.Reverse(shuffled[0].Series[0].Times)
	if again := render(t, shuffled); !bytes.Equal(first, again) {
		t.Error("reordering a series' times changed the picture")
	}
}
