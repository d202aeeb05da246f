package app

import (
	"testing"

	"github.com/pillar-csi/pillar-csi/api/flagdoc"
)

// TestFlagReference keeps docs/reference/pillar-agent-flags.md equal to
// the flags ParseFlags accepts (make generate rewrites it).
func TestFlagReference(t *testing.T) {
	o := DefaultOptions()
	flagdoc.Check(t, "../../docs/reference/pillar-agent-flags.md", flagdoc.Markdown("pillar-agent",
		"pillar-agent runs on each storage node (the chart's DaemonSet, `hostNetwork`): it creates ZFS and LVM volumes, exports them "+
			"through nvmet's configfs and keeps the fencing marks. `pillar-agent -h` prints the same list; `pillar-agent marks -h` "+
			"the commands that inspect and repair the marks. Where the chart sets a flag, its value is in "+
			"[the chart's README](../../deploy/charts/pillar-csi/README.md).", newFlagSet(&o)))
}
