package zfs

// SetFindZvol replaces how b finds a zvol's device node: the unit tests
// have no /sys/block/zd*.
func SetFindZvol(b *Backend, f func(dataset string) (string, error)) { b.findZvol = f }
