package lvm

// SetCheckNode replaces how b checks a device node: the unit tests have no
// /dev/mapper.
func SetCheckNode(b *Backend, f func(path string, major, minor int64) error) { b.checkNode = f }

// DMPath is dmPath, the node of an active LV.
var DMPath = dmPath

// AllowUnzeroedThinPool sets Config.AllowUnzeroedThinPool on b: the replay
// cases share one constructor.
func AllowUnzeroedThinPool(b *Backend) { b.allowUnzeroed = true }

// SetBlockNode replaces how b reads which device a node is.
func SetBlockNode(b *Backend, f func(path string) (major, minor int64, err error)) { b.blockNode = f }

// WaitingLookups returns how many of b's LV look-ups wait for a report.
func WaitingLookups(b *Backend) int { return b.lookups.Waiting() }

// WaitingAdmissions returns how many of b's thin creates, expansions,
// snapshots and clones wait for the admission lock.
func WaitingAdmissions(b *Backend) int { return b.admit.Waiting() }

// SetAfterAsked sets the function a thin create calls with its LV's name
// once it has read which admission listings had begun.
func SetAfterAsked(b *Backend, f func(name string)) { b.afterAsked = f }
