package zfs

import "time"

// SetFindZvol replaces how b finds a zvol's device node: the unit tests
// have no /sys/block/zd*.
func SetFindZvol(b *Backend, f func(dataset string) (string, error)) { b.findZvol = f }

// SetBusyRetry sets how often and how far apart Delete repeats a busy
// destroy; the replay tests expect each capture once.
func SetBusyRetry(b *Backend, n int, delay time.Duration) { b.busyRetries, b.busyDelay = n, delay }
