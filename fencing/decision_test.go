package fencing

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Unix(1_700_000_000, 0)

const (
	uidA = "6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0001"
	uidB = "6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0002"
	uidC = "6f1c3a52-0d4e-4b8e-9a39-2d7d0a1b0003"
)

func tok(uid string, gen uint64) Token { return Token{UID: uid, Generation: gen} }

func hist(uids ...string) []EndedLifecycle {
	var h []EndedLifecycle
	for _, u := range uids {
		h = append(h, EndedLifecycle{UID: u, At: t0})
	}
	return h
}

func active(uid string, gen uint64, ended ...string) *Mark {
	return &Mark{Phase: PhaseActive, UID: uid, Generation: gen, History: hist(ended...)}
}

func ended(uid string, gen uint64, history ...string) *Mark {
	return &Mark{Phase: PhaseEnded, UID: uid, Generation: gen, History: hist(history...)}
}

// decisionTable is the table in doc.go, row by row: every rule, its
// boundaries, and each kind where the rule covers both.
var decisionTable = []struct {
	name    string
	cur     *Mark
	retired []string // lifecycle UIDs of the volume in the ledger
	kind    Kind
	tok     Token
	rule    int
	reason  Reason
	want    *Mark // mark afterwards; nil: unchanged
}{
	{name: "no token, no mark", kind: KindMutate, tok: Token{}, rule: 1, reason: ReasonMissingToken},
	{name: "no token, active mark", cur: active(uidA, 5), kind: KindMutate, tok: Token{}, rule: 1, reason: ReasonMissingToken},
	{name: "no token, end", cur: active(uidA, 5), kind: KindEnd, tok: Token{}, rule: 1, reason: ReasonMissingToken},
	{name: "generation without UID", cur: active(uidA, 5), kind: KindMutate, tok: tok("", 5), rule: 2, reason: ReasonMalformed},
	{name: "unknown kind", cur: active(uidA, 5), kind: 0, tok: tok(uidA, 5), rule: 2, reason: ReasonMalformed},
	{name: "UID with a space", cur: active(uidA, 5), kind: KindMutate, tok: tok("a b", 5), rule: 2, reason: ReasonMalformed},
	{name: "UID with a control byte", kind: KindMutate, tok: tok("a\x00", 5), rule: 2, reason: ReasonMalformed},
	{name: "UID too long", kind: KindEnd, tok: tok(strings.Repeat("u", MaxUIDLen+1), 5), rule: 2, reason: ReasonMalformed},
	{name: "no mark, retired UID, mutate", retired: []string{uidA}, kind: KindMutate, tok: tok(uidA, 9), rule: 4, reason: ReasonLifecycleEnded},
	{name: "no mark, retired UID, end", retired: []string{uidA}, kind: KindEnd, tok: tok(uidA, 9), rule: 4, reason: ReasonLifecycleEnded},
	{name: "no mark, first lifecycle", kind: KindMutate, tok: tok(uidA, 0), rule: 5, want: active(uidA, 0)},
	{name: "no mark, other UID retired", retired: []string{uidB}, kind: KindMutate, tok: tok(uidA, 3), rule: 5, want: active(uidA, 3)},
	{name: "UID of maximum length", kind: KindMutate, tok: tok(strings.Repeat("~", MaxUIDLen), 1), rule: 5, want: active(strings.Repeat("~", MaxUIDLen), 1)},
	{name: "no mark, end first", kind: KindEnd, tok: tok(uidA, 3), rule: 6, want: ended(uidA, 3, uidA)},
	{name: "active, older generation", cur: active(uidA, 5), kind: KindMutate, tok: tok(uidA, 4), rule: 7, reason: ReasonStaleGeneration},
	{name: "active, older generation, end", cur: active(uidA, 5), kind: KindEnd, tok: tok(uidA, 0), rule: 7, reason: ReasonStaleGeneration},
	{name: "active, equal generation (retry)", cur: active(uidA, 5), kind: KindMutate, tok: tok(uidA, 5), rule: 8, want: active(uidA, 5)},
	{name: "active, newer generation", cur: active(uidA, 5, uidC), kind: KindMutate, tok: tok(uidA, 6), rule: 8, want: active(uidA, 6, uidC)},
	{name: "active, largest step", cur: active(uidA, 5), kind: KindMutate, tok: tok(uidA, 5+MaxGenerationStep), rule: 8, want: active(uidA, 5+MaxGenerationStep)},
	{name: "active, a step too far", cur: active(uidA, 5), kind: KindMutate, tok: tok(uidA, 6+MaxGenerationStep), rule: 18, reason: ReasonMalformed},
	{name: "active, largest generation", cur: active(uidA, 5), kind: KindMutate, tok: tok(uidA, ^uint64(0)), rule: 18, reason: ReasonMalformed},
	{name: "active, end a step too far", cur: active(uidA, 5), kind: KindEnd, tok: tok(uidA, ^uint64(0)), rule: 18, reason: ReasonMalformed},
	{name: "none, first lifecycle too far", cur: nil, kind: KindMutate, tok: tok(uidA, MaxGenerationStep+1), rule: 18, reason: ReasonMalformed},
	{name: "ended, new lifecycle too far", cur: ended(uidA, 5, uidA), kind: KindMutate, tok: tok(uidB, ^uint64(0)), rule: 18, reason: ReasonMalformed},
	{name: "stale beats too far", cur: ended(uidA, 5, uidA), kind: KindMutate, tok: tok(uidA, ^uint64(0)), rule: 12, reason: ReasonLifecycleEnded},
	{name: "active, end at equal generation", cur: active(uidA, 5), kind: KindEnd, tok: tok(uidA, 5), rule: 9, want: ended(uidA, 5, uidA)},
	{name: "active, end at newer generation", cur: active(uidA, 5, uidC), kind: KindEnd, tok: tok(uidA, 7), rule: 9, want: ended(uidA, 7, uidC, uidA)},
	{name: "active, ended predecessor", cur: active(uidB, 1, uidA), kind: KindMutate, tok: tok(uidA, 9), rule: 10, reason: ReasonLifecycleEnded},
	{name: "active, ended predecessor ends again", cur: active(uidB, 1, uidA), kind: KindEnd, tok: tok(uidA, 9), rule: 10, reason: ReasonLifecycleEnded},
	{name: "active, unknown UID", cur: active(uidA, 5), kind: KindMutate, tok: tok(uidB, 9), rule: 11, reason: ReasonLifecycleReplaced},
	{name: "active, unknown UID ends", cur: active(uidA, 5), kind: KindEnd, tok: tok(uidB, 0), rule: 11, reason: ReasonLifecycleReplaced},
	{name: "active, retired UID", cur: active(uidA, 5), retired: []string{uidB}, kind: KindMutate, tok: tok(uidB, 9), rule: 10, reason: ReasonLifecycleEnded},
	{name: "active, own UID retired", cur: active(uidA, 5), retired: []string{uidA}, kind: KindMutate, tok: tok(uidA, 6), rule: 8, want: active(uidA, 6)},
	{name: "ended, same lifecycle mutates", cur: ended(uidA, 5, uidA), kind: KindMutate, tok: tok(uidA, 6), rule: 12, reason: ReasonLifecycleEnded},
	{name: "ended, same lifecycle retries old generation", cur: ended(uidA, 5, uidA), kind: KindMutate, tok: tok(uidA, 5), rule: 12, reason: ReasonLifecycleEnded},
	{name: "ended, stale end", cur: ended(uidA, 5, uidA), kind: KindEnd, tok: tok(uidA, 4), rule: 13, reason: ReasonStaleGeneration},
	{name: "ended, end retried", cur: ended(uidA, 5, uidA), kind: KindEnd, tok: tok(uidA, 5), rule: 14, want: ended(uidA, 5, uidA)},
	{name: "ended, end retried at newer generation", cur: ended(uidA, 5, uidA), kind: KindEnd, tok: tok(uidA, 8), rule: 14, want: ended(uidA, 8, uidA)},
	{name: "ended, earlier lifecycle", cur: ended(uidB, 2, uidA, uidB), kind: KindMutate, tok: tok(uidA, 9), rule: 15, reason: ReasonLifecycleEnded},
	{name: "ended, earlier lifecycle ends", cur: ended(uidB, 2, uidA, uidB), kind: KindEnd, tok: tok(uidA, 9), rule: 15, reason: ReasonLifecycleEnded},
	{name: "ended, retired lifecycle", cur: ended(uidA, 2, uidA), retired: []string{uidC}, kind: KindMutate, tok: tok(uidC, 9), rule: 15, reason: ReasonLifecycleEnded},
	{name: "ended, new lifecycle", cur: ended(uidA, 5, uidA), kind: KindMutate, tok: tok(uidB, 0), rule: 16, want: active(uidB, 0, uidA)},
	{name: "ended, new lifecycle with lower generation", cur: ended(uidA, 50, uidC, uidA), retired: []string{uidC}, kind: KindMutate, tok: tok(uidB, 1), rule: 16, want: active(uidB, 1, uidC, uidA)},
	{name: "ended, new lifecycle ends at once", cur: ended(uidA, 5, uidA), kind: KindEnd, tok: tok(uidB, 1), rule: 17, want: ended(uidB, 1, uidA, uidB)},
}

func TestDecide(t *testing.T) {
	for _, tc := range decisionTable {
		t.Run(tc.name, func(t *testing.T) {
			var before string
			if tc.cur != nil {
				before = tc.cur.String()
			}
			retired := func(uid string) bool {
				for _, r := range tc.retired {
					if r == uid {
						return true
					}
				}
				return false
			}
			d := Decide(tc.cur, tc.kind, tc.tok, t0, retired)
			if d.Rule != tc.rule || d.Reason != tc.reason {
				t.Fatalf("Decide = rule %d %v (%s), want rule %d %v", d.Rule, d.Reason, d.Detail, tc.rule, tc.reason)
			}
			if d.Detail == "" {
				t.Error("Decision.Detail is empty")
			}
			if tc.cur != nil && tc.cur.String() != before {
				t.Errorf("Decide modified its input: %s, was %s", tc.cur, before)
			}
			if tc.reason != Accepted {
				if d.Mark != nil || d.Changed {
					t.Errorf("refused decision carries mark %v, changed %v", d.Mark, d.Changed)
				}
				return
			}
			if diff := cmp.Diff(tc.want, d.Mark); diff != "" {
				t.Errorf("mark afterwards (-want +got):\n%s", diff)
			}
			wantChanged := tc.cur == nil || cmp.Diff(tc.cur, tc.want) != ""
			if d.Changed != wantChanged {
				t.Errorf("Changed = %v, want %v", d.Changed, wantChanged)
			}
		})
	}
}

// TestStoreDecisionTable runs the same table through a Store on disk: the
// store must reach the same verdict, leave the mark as the table says, and
// wrap the verdict in its error type.
func TestStoreDecisionTable(t *testing.T) {
	const vol = "pvc-table"
	for _, tc := range decisionTable {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t, t.TempDir(), Options{Now: func() time.Time { return t0 }})
			if tc.cur != nil {
				mustWriteMark(t, s, vol, tc.cur)
			}
			var fps []fingerprint
			for _, uid := range tc.retired {
				fps = append(fps, fingerprintOf(vol, uid))
			}
			if err := s.addToLedger(fps); err != nil {
				t.Fatal(err)
			}
			var err error
			var got *Mark
			switch tc.kind {
			case KindEnd:
				got, err = s.End(context.Background(), vol, tc.tok)
			case KindMutate:
				got, err = s.Advance(context.Background(), vol, tc.tok)
			default:
				err = s.Do(context.Background(), vol, tc.kind, tc.tok, func(context.Context) error {
					t.Error("fn ran for a refused request")
					return nil
				})
			}
			if r := RejectionReason(err); r != tc.reason {
				t.Fatalf("reason %v (err %v), want %v", r, err, tc.reason)
			}
			after, gerr := s.Get(context.Background(), vol)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if tc.reason != Accepted {
				if !IsRejected(err) || got != nil {
					t.Errorf("refusal: IsRejected = %v, mark %v", IsRejected(err), got)
				}
				var fe *Error
				if !errors.As(err, &fe) || fe.VolumeID != vol || fe.Err == nil {
					t.Errorf("refusal error %#v lacks volume or cause", err)
				}
				if diff := cmp.Diff(tc.cur, after); diff != "" {
					t.Errorf("a refused request changed the mark (-before +after):\n%s", diff)
				}
				return
			}
			if tc.kind != KindMutate && tc.kind != KindEnd {
				return
			}
			if err != nil {
				t.Fatalf("accepted request failed: %v", err)
			}
			if diff := cmp.Diff(tc.want, after); diff != "" {
				t.Errorf("mark on disk (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mark returned (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStoreRulesBeforeIO checks the rows that only the store can apply: an
// invalid volume ID (rule 2), and an unreadable mark (rule 3), which must
// not shadow rules 1 and 2 and must never be overwritten.
func TestStoreRulesBeforeIO(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir(), Options{})
	for _, id := range []string{"", strings.Repeat("x", MaxVolumeIDLen+1)} {
		_, err := s.Advance(ctx, id, tok(uidA, 1))
		if RejectionReason(err) != ReasonMalformed || !errors.Is(err, ErrMalformed) {
			t.Errorf("volume ID of %d bytes: err %v, want MALFORMED", len(id), err)
		}
	}

	const vol = "pvc-corrupt"
	path := s.path(vol)
	garbage := []byte("PCFM\x01 definitely not a mark")
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		kind   Kind
		tok    Token
		reason Reason
	}{
		{KindMutate, Token{}, ReasonMissingToken},
		{KindMutate, tok("bad uid", 1), ReasonMalformed},
		{KindMutate, tok(uidA, 1), ReasonMarkUnreadable},
		{KindEnd, tok(uidA, 1), ReasonMarkUnreadable},
	}
	for _, c := range cases {
		err := s.Do(ctx, vol, c.kind, c.tok, func(context.Context) error {
			t.Error("fn ran on a corrupt mark")
			return nil
		})
		if r := RejectionReason(err); r != c.reason {
			t.Errorf("%v %v: reason %v (%v), want %v", c.kind, c.tok, r, err, c.reason)
		}
		if c.reason == ReasonMarkUnreadable && !errors.Is(err, ErrCorruptMark) {
			t.Errorf("unreadable mark error does not wrap ErrCorruptMark: %v", err)
		}
	}
	if _, err := s.Get(ctx, vol); RejectionReason(err) != ReasonMarkUnreadable {
		t.Errorf("Get of a corrupt mark: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != string(garbage) {
		t.Errorf("the corrupt mark was changed: %q, %v", b, err)
	}
}

func openTest(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := Open(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Error(err)
		}
	})
	return s
}

func mustWriteMark(t testing.TB, s *Store, id string, m *Mark) {
	t.Helper()
	if err := s.writeMark(context.Background(), id, s.path(id), m.clone()); err != nil {
		t.Fatal(err)
	}
}
