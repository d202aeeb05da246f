package cluster

// MemUsedMiB is the guest's MemTotal less MemAvailable, in MiB (-1 when
// /proc/meminfo cannot be read): what a suite logs beside its figures, to
// size the guest's memory.
func MemUsedMiB() int { return memUsedMiB() }
