package deploy

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The README's quickstart is the install every end-to-end test and the
// demo stand on: Install runs the shell blocks of its "Install" part as
// written, TestQuickstart those of its "A volume" part. What the lab must
// differ in (its node's name, its locally built images) is a replacement
// of text that the README must still contain, so that an edit of the
// README that the suite would not notice fails instead.
const (
	// QuickstartInstall and QuickstartVolume are the parts of the
	// quickstart, by their "###" headings.
	QuickstartInstall = "Install"
	QuickstartVolume  = "A volume"
)

// QuickstartScript returns the ```sh blocks of one part of README.md's
// quickstart at root, in order, with each (old, new) replacement of repl
// made. A part without shell blocks, and a replacement whose old text the
// part does not contain, are errors.
func QuickstartScript(root, part string, repl ...string) (string, error) {
	blocks, err := QuickstartBlocks(root, part, repl...)
	return strings.Join(blocks, "\n"), err
}

// QuickstartBlocks is QuickstartScript block by block, for a test that
// looks at the cluster between two of them.
func QuickstartBlocks(root, part string, repl ...string) ([]string, error) {
	return ShellBlocks(filepath.Join(root, "README.md"), "Quickstart", part, repl...)
}

// RecoveryBlocks are the commands of the ExportSpecMissing recovery
// procedure of docs/troubleshooting.md at root, with each (old, new)
// replacement of repl made.
func RecoveryBlocks(root string, repl ...string) ([]string, error) {
	return ShellBlocks(filepath.Join(root, "docs", "troubleshooting.md"), "ExportSpecMissing", "Recovery procedure", repl...)
}

// recoveryReplacements fill in the recovery procedure's placeholders
// with the volume ID and the PersistentVolume of the volume to recover.
func recoveryReplacements(volumeID, pv string) []string {
	return []string{"<volume ID>", volumeID, "<pv name>", pv}
}

// RecoveryScript is the recovery procedure's commands for one volume.
func RecoveryScript(root, volumeID, pv string) (string, error) {
	blocks, err := RecoveryBlocks(root, recoveryReplacements(volumeID, pv)...)
	return strings.Join(blocks, "\n"), err
}

// ShellBlocks returns the ```sh blocks, indented or not, under the heading
// "### part" of the section "## section" of the Markdown file at path, in
// order, with each (old, new) replacement of repl made. A part without
// shell blocks, and a replacement whose old text none of them contains,
// are errors.
func ShellBlocks(path, section, part string, repl ...string) ([]string, error) {
	if len(repl)%2 != 0 {
		return nil, errors.New("shell blocks: replacements come in pairs")
	}
	blocks, err := shellBlocks(path, section, part)
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(repl); i += 2 {
		found := false
		for j, b := range blocks {
			found = found || strings.Contains(b, repl[i])
			blocks[j] = strings.ReplaceAll(b, repl[i], repl[i+1])
		}
		if !found {
			return nil, fmt.Errorf("%s (%s, %s) no longer says %q", path, section, part, repl[i])
		}
	}
	return blocks, nil
}

// shellBlocks reads the ```sh blocks of one part of one section of the
// Markdown file at path.
func shellBlocks(path, section, part string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks            []string
		inSection, inPart bool
		block             *strings.Builder
		indent            string
	)
	fence := func(line string) (string, bool) {
		t := strings.TrimSpace(line)
		return strings.TrimPrefix(t, "```"), strings.HasPrefix(t, "```")
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		lang, isFence := fence(line)
		switch {
		case block != nil:
			if isFence && lang == "" {
				blocks = append(blocks, block.String())
				block = nil
			} else {
				block.WriteString(strings.TrimPrefix(line, indent) + "\n")
			}
		case isFence:
			if inPart && lang == "sh" {
				block, indent = &strings.Builder{}, line[:len(line)-len(strings.TrimLeft(line, " "))]
				continue
			}
			// Other fences (output, YAML, blocks elsewhere) are not run;
			// skip to their end, headings in them included.
			for sc.Scan() {
				if l, ok := fence(sc.Text()); ok && l == "" {
					break
				}
			}
		case strings.HasPrefix(line, "## "):
			inSection, inPart = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == section, false
		case strings.HasPrefix(line, "### "):
			inPart = inSection && strings.TrimSpace(strings.TrimPrefix(line, "### ")) == part
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if block != nil {
		return nil, fmt.Errorf("%s: a ```sh block of %q never ends", path, part)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no ```sh block under %q of %q", path, "### "+part, "## "+section)
	}
	return blocks, nil
}
