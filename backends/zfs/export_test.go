package zfs

import "time"

// SetZvolDevices replaces how b finds the zvols' device nodes: the unit
// tests have no /sys/block/zd*.
func SetZvolDevices(b *Backend, f func() (map[string]string, error)) { b.zvolDevices = f }

// SetBusyRetry sets how often and how far apart Delete repeats a busy
// destroy; the replay tests expect each capture once.
func SetBusyRetry(b *Backend, n int, delay time.Duration) { b.busyRetries, b.busyDelay = n, delay }

// SetClock replaces the clock that ages b's admission figure.
func SetClock(b *Backend, now func() time.Time) { b.figure.now = now }
