package cluster

import (
	"errors"
	"os"
	"path/filepath"
)

// RepoRoot is the directory of go.work above the working directory: the
// lab runs each test binary in its package directory, and the suites find
// bin/ and deploy/ from there.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.work above " + dir + ": run the suite from the repository")
		}
	}
}
