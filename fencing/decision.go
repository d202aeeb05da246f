package fencing

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Reason says why a request was refused. The zero Reason, Accepted, means it
// was not.
type Reason uint8

const (
	// Accepted is the zero Reason: the request may change the volume.
	Accepted Reason = iota
	// ReasonMissingToken: the request carries no token (rule 1).
	ReasonMissingToken
	// ReasonMalformed: the volume ID, lifecycle UID or request kind is
	// invalid (rule 2).
	ReasonMalformed
	// ReasonMarkUnreadable: the volume's mark exists but cannot be read or
	// fails its checksum; the store fails closed (rule 3).
	ReasonMarkUnreadable
	// ReasonStaleGeneration: the token's generation is older than the one
	// the mark holds for the same lifecycle (rules 7 and 13).
	ReasonStaleGeneration
	// ReasonLifecycleEnded: the token's lifecycle has ended on this volume
	// (rules 4, 10, 12 and 15).
	ReasonLifecycleEnded
	// ReasonLifecycleReplaced: another lifecycle holds the volume and has
	// not ended, and the token's lifecycle is not known to have ended
	// (rule 11).
	ReasonLifecycleReplaced
	// ReasonUnmarked: the volume has no mark, yet its resources exist on
	// the storage node (rule 19): the marks were lost or never written,
	// and admitting a first lifecycle would hand an existing volume to any
	// token. An operator adopts the volume for its lifecycle first.
	ReasonUnmarked
)

var reasonNames = [...]string{
	Accepted:                "ACCEPTED",
	ReasonMissingToken:      "MISSING_TOKEN",
	ReasonMalformed:         "MALFORMED",
	ReasonMarkUnreadable:    "MARK_UNREADABLE",
	ReasonStaleGeneration:   "STALE_GENERATION",
	ReasonLifecycleEnded:    "LIFECYCLE_ENDED",
	ReasonLifecycleReplaced: "LIFECYCLE_REPLACED",
	ReasonUnmarked:          "UNMARKED",
}

// String returns the reason's stable upper-case name, for example
// "STALE_GENERATION". The names are part of the API: they appear in logs and
// in gRPC error details, and ParseReason reads them back.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// ParseReason returns the Reason whose String is name.
func ParseReason(name string) (Reason, bool) {
	for r, n := range reasonNames {
		if n == name {
			return Reason(r), true
		}
	}
	return 0, false
}

// Decision is the outcome of one request under the decision table in the
// package documentation.
type Decision struct {
	// Rule is the number of the table row that decided.
	Rule int
	// Reason is Accepted or why the request was refused.
	Reason Reason
	// Detail explains the decision in words, for logs and errors.
	Detail string
	// Mark is the volume's mark after an accepted request, sharing no
	// memory with the mark passed to Decide. It is nil when the request was
	// refused: a refused request never changes a mark.
	Mark *Mark
	// Changed reports whether Mark differs from the mark passed to Decide,
	// i.e. whether it must be written durably before the request may
	// proceed.
	Changed bool
}

// Accepted reports whether the request may change the volume.
func (d Decision) Accepted() bool { return d.Reason == Accepted }

// Decide applies the decision table to a request of kind k carrying tok,
// against cur, the volume's current mark (nil if it has none). now stamps a
// lifecycle that ends. retired reports whether a lifecycle UID of this
// volume was moved to the store's ledger of retired lifecycles; Decide calls
// it only when admitting a new lifecycle depends on the answer, and treats a
// nil retired as "none retired".
//
// Decide is pure: it reads no files and does not modify cur. Rule 3 (an
// unreadable mark) belongs to the Store, which never calls Decide without a
// valid mark or a proof that there is none.
func Decide(cur *Mark, k Kind, tok Token, now time.Time, retired func(uid string) bool) Decision {
	if d, ok := checkRequest(k, tok); !ok {
		return d
	}
	d := decide(cur, k, tok, now, retired)
	if base := lifecycleBase(cur, tok.UID); d.Accepted() && tok.Generation > base && tok.Generation-base > MaxGenerationStep {
		return reject(18, ReasonMalformed, fmt.Sprintf("generation %d is more than %d above %d, the lifecycle's generation here",
			tok.Generation, MaxGenerationStep, base))
	}
	return d
}

// decide is Decide without rule 18.
func decide(cur *Mark, k Kind, tok Token, now time.Time, retired func(uid string) bool) Decision {
	u, g := tok.UID, tok.Generation
	isRetired := func() bool { return retired != nil && retired(u) }

	if cur == nil {
		switch {
		case isRetired():
			return reject(4, ReasonLifecycleEnded, fmt.Sprintf("lifecycle %q ended and was retired", u))
		case k == KindMutate:
			return accept(5, &Mark{Phase: PhaseActive, UID: u, Generation: g}, true,
				fmt.Sprintf("first lifecycle %q admitted at generation %d", u, g))
		default:
			return accept(6, &Mark{Phase: PhaseEnded, UID: u, Generation: g, History: []EndedLifecycle{{UID: u, At: now}}}, true,
				fmt.Sprintf("lifecycle %q ended at generation %d before any other request", u, g))
		}
	}

	switch cur.Phase {
	case PhaseActive:
		switch {
		case u == cur.UID && g < cur.Generation:
			return reject(7, ReasonStaleGeneration, staleDetail(cur, g))
		case u == cur.UID && k == KindMutate:
			next := cur.clone()
			next.Generation = g
			return accept(8, next, g != cur.Generation,
				fmt.Sprintf("lifecycle %q at generation %d (mark was %d)", u, g, cur.Generation))
		case u == cur.UID:
			next := cur.clone()
			next.Phase, next.Generation = PhaseEnded, g
			next.History = append(next.History, EndedLifecycle{UID: u, At: now})
			return accept(9, next, true, fmt.Sprintf("lifecycle %q ended at generation %d", u, g))
		case cur.hasEnded(u) || isRetired():
			return reject(10, ReasonLifecycleEnded,
				fmt.Sprintf("lifecycle %q ended; lifecycle %q holds the volume", u, cur.UID))
		default:
			return reject(11, ReasonLifecycleReplaced,
				fmt.Sprintf("lifecycle %q holds the volume and has not ended; %q is not known to have ended before it", cur.UID, u))
		}
	case PhaseEnded:
		switch {
		case u == cur.UID && k == KindMutate:
			return reject(12, ReasonLifecycleEnded, fmt.Sprintf("lifecycle %q ended at generation %d", u, cur.Generation))
		case u == cur.UID && g < cur.Generation:
			return reject(13, ReasonStaleGeneration, staleDetail(cur, g))
		case u == cur.UID:
			next := cur.clone()
			next.Generation = g
			return accept(14, next, g != cur.Generation,
				fmt.Sprintf("lifecycle %q already ended; end retried at generation %d", u, g))
		case cur.hasEnded(u) || isRetired():
			return reject(15, ReasonLifecycleEnded, fmt.Sprintf("lifecycle %q ended", u))
		case k == KindMutate:
			next := cur.clone()
			next.Phase, next.UID, next.Generation = PhaseActive, u, g
			return accept(16, next, true,
				fmt.Sprintf("new lifecycle %q admitted at generation %d after %q ended", u, g, cur.UID))
		default:
			next := cur.clone()
			next.UID, next.Generation = u, g
			next.History = append(next.History, EndedLifecycle{UID: u, At: now})
			return accept(17, next, true,
				fmt.Sprintf("new lifecycle %q ended at generation %d before any other request", u, g))
		}
	}
	// A Mark from the store is validated when decoded; anything else is a
	// programming error, refused rather than guessed at.
	return reject(3, ReasonMarkUnreadable, fmt.Sprintf("mark has invalid phase %d", cur.Phase))
}

// checkRequest applies rules 1 and 2 to what the request carries, before
// any mark is read: a request without a valid token is refused the same way
// whatever the volume's mark holds, even an unreadable one.
func checkRequest(k Kind, tok Token) (Decision, bool) {
	if tok.IsZero() {
		return reject(1, ReasonMissingToken, "the request carries no fencing token"), false
	}
	if !k.valid() {
		return reject(2, ReasonMalformed, "unknown request kind "+k.String()), false
	}
	if err := validateUID(tok.UID); err != nil {
		return reject(2, ReasonMalformed, err.Error()), false
	}
	return Decision{}, true
}

// MaxGenerationStep is how far above the generation a mark holds for the
// token's lifecycle (0 for a lifecycle it does not hold) a token may be
// (rule 18). pillar-controller issues generations one at a time from 1,
// each by a compare-and-swap of the volume's record, so a legitimate token
// is above the mark only by the calls that never reached this agent; a
// million of them is years of retries. Without the bound, one request with
// generation 2^64-1 would make every later call of the lifecycle stale.
const MaxGenerationStep = 1 << 20

// lifecycleBase is the generation the mark holds for lifecycle u, 0 when it
// holds another or none.
func lifecycleBase(cur *Mark, u string) uint64 {
	if cur != nil && cur.UID == u {
		return cur.Generation
	}
	return 0
}

func staleDetail(cur *Mark, g uint64) string {
	return fmt.Sprintf("generation %d is older than the mark's generation %d for lifecycle %q", g, cur.Generation, cur.UID)
}

func reject(rule int, r Reason, detail string) Decision {
	return Decision{Rule: rule, Reason: r, Detail: detail}
}

func accept(rule int, next *Mark, changed bool, detail string) Decision {
	return Decision{Rule: rule, Reason: Accepted, Detail: detail, Mark: next, Changed: changed}
}

// hasEnded reports whether uid is in the mark's history of ended lifecycles.
func (m *Mark) hasEnded(uid string) bool {
	return slices.ContainsFunc(m.History, func(e EndedLifecycle) bool { return e.UID == uid })
}
