package zfs

import "time"

// AdmissionMaxAge is how old the listing of the pool a sparse Create or
// Expand is admitted against may be. Within it, the backend admits
// against that listing's figure less what it admitted since; a request
// that figure refuses is decided on a fresh listing. Space freed meanwhile
// only makes the figure smaller than the truth; space taken by other
// tools in the pool is seen at most AdmissionMaxAge late. Capacity always
// lists.
const AdmissionMaxAge = 30 * time.Second

// admission is the space available to sparse zvols as the last listing
// found it, less what was admitted since. The zero value has no listing.
// It is not safe for concurrent use: the backend holds its admission lock
// around the check and the change it admits.
type admission struct {
	available int64
	listed    time.Time
	now       func() time.Time // time.Now when nil
}

func (a *admission) clock() time.Time {
	if a.now == nil {
		return time.Now()
	}
	return a.now()
}

// admits reports whether need bytes fit a listing younger than
// AdmissionMaxAge. False means: list again and decide on that.
func (a *admission) admits(need int64) bool {
	return !a.listed.IsZero() && a.clock().Sub(a.listed) < AdmissionMaxAge && need <= a.available
}

// record keeps a fresh listing's available bytes.
func (a *admission) record(available int64) { a.available, a.listed = available, a.clock() }

// forget drops the listing, so that the next request lists.
func (a *admission) forget() { a.listed = time.Time{} }

// take takes n admitted bytes off the figure.
func (a *admission) take(n int64) { a.available = max(a.available-n, 0) }
