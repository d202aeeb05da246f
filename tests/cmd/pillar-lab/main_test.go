package main

import (
	"flag"
	"slices"
	"testing"
)

// make check runs the kernel lab as "pillar-lab test -timeout 80m -- -test.skip RE",
// with no package pattern: the flag package alone would drop that "--" and
// make "-test.skip" a package pattern.
func TestSplitTestArgs(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		patterns, testArgs []string
	}{
		{args: []string{"-timeout", "80m", "--", "-test.skip", "^TestX$"}, testArgs: []string{"-test.skip", "^TestX$"}},
		{args: []string{"-apiserver", "tests/kernel/agent", "--", "-test.v"}, patterns: []string{"tests/kernel/agent"}, testArgs: []string{"-test.v"}},
		{args: []string{"tests/kernel/..."}, patterns: []string{"tests/kernel/..."}},
		{args: []string{"--", "--", "-x"}, testArgs: []string{"--", "-x"}},
		{},
	} {
		own, testArgs := splitTestArgs(tc.args)
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.String("timeout", "", "")
		fs.Bool("apiserver", false, "")
		if err := fs.Parse(own); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := fs.Args(); !slices.Equal(got, tc.patterns) && (len(got) != 0 || len(tc.patterns) != 0) {
			t.Errorf("%q: patterns %q, want %q", tc.args, got, tc.patterns)
		}
		if !slices.Equal(testArgs, tc.testArgs) {
			t.Errorf("%q: test arguments %q, want %q", tc.args, testArgs, tc.testArgs)
		}
	}
}
