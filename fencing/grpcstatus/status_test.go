package grpcstatus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pillar-csi/pillar-csi/fencing"
	"github.com/pillar-csi/pillar-csi/fencing/grpcstatus"
)

func openStore(t *testing.T) *fencing.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := fencing.Open(ctx, t.TempDir(), fencing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// overTheWire returns err as a client receives it: the status proto is
// serialized into the grpc-status-details-bin trailer and parsed back.
func overTheWire(t *testing.T, err error) error {
	t.Helper()
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		t.Fatal(merr)
	}
	var p spb.Status
	if uerr := proto.Unmarshal(b, &p); uerr != nil {
		t.Fatal(uerr)
	}
	return status.ErrorProto(&p)
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	const vol = "pvc-\xff"
	if _, err := s.Advance(ctx, vol, fencing.Token{UID: "uid-a", Generation: 5}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tok  fencing.Token
		want fencing.Reason
	}{
		{fencing.Token{}, fencing.ReasonMissingToken},
		{fencing.Token{UID: "has space", Generation: 1}, fencing.ReasonMalformed},
		{fencing.Token{UID: "uid-a", Generation: 4}, fencing.ReasonStaleGeneration},
		{fencing.Token{UID: "uid-b", Generation: 9}, fencing.ReasonLifecycleReplaced},
	}
	for _, c := range cases {
		_, ferr := s.Advance(ctx, vol, c.tok)
		for _, err := range []error{grpcstatus.Error(ferr), overTheWire(t, grpcstatus.Error(ferr))} {
			if code := status.Code(err); code != codes.FailedPrecondition {
				t.Errorf("%v: code %v, want FailedPrecondition", c.tok, code)
			}
			if r, ok := grpcstatus.Reason(err); !ok || r != c.want {
				t.Errorf("%v: Reason = %v, %v; want %v", c.tok, r, ok, c.want)
			}
			if msg := status.Convert(err).Message(); msg != ferr.Error() {
				t.Errorf("message %q, want %q", msg, ferr.Error())
			}
		}
	}
}

func TestOperationalErrors(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, errCancelled := s.Advance(cancelled, "pvc-1", fencing.Token{UID: "u", Generation: 1})

	expired, cancel2 := context.WithTimeout(ctx, -time.Second)
	defer cancel2()
	_, errExpired := s.Advance(expired, "pvc-1", fencing.Token{UID: "u", Generation: 1})

	passThrough := status.Error(codes.ResourceExhausted, "pool is full")
	errFromDo := s.Do(ctx, "pvc-2", fencing.KindMutate, fencing.Token{UID: "u", Generation: 1},
		func(context.Context) error { return fmt.Errorf("create zvol: %w", passThrough) })

	locked, cancel3 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel3()
	_, errLocked := fencing.Open(locked, s.Dir(), fencing.Options{})

	cases := []struct {
		name string
		err  error
		want codes.Code
	}{
		{"nil", nil, codes.OK},
		{"cancelled", errCancelled, codes.Canceled},
		{"expired", errExpired, codes.DeadlineExceeded},
		{"status from Do", errFromDo, codes.ResourceExhausted},
		{"locked", errLocked, codes.Unavailable},
		{"other", errors.New("disk full"), codes.Internal},
	}
	for _, c := range cases {
		if c.err == nil && c.want != codes.OK {
			t.Fatalf("%s: no error to map", c.name)
		}
		got := grpcstatus.Error(c.err)
		if code := status.Code(got); code != c.want {
			t.Errorf("%s: code %v (%v), want %v", c.name, code, got, c.want)
		}
		if _, ok := grpcstatus.Reason(got); ok {
			t.Errorf("%s: operational error carries a fencing reason", c.name)
		}
	}
	if grpcstatus.Error(nil) != nil {
		t.Error("Error(nil) != nil")
	}
}

// A gRPC handler of the storage agent refuses stale requests with
// FAILED_PRECONDITION; the controller reads the reason back.
func Example() {
	dir, err := os.MkdirTemp("", "generations")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := fencing.Open(ctx, dir, fencing.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()

	handle := func(tok fencing.Token) error {
		return grpcstatus.Error(store.Do(ctx, "pvc-1", fencing.KindMutate, tok, func(context.Context) error {
			return nil // change the volume here
		}))
	}
	for _, tok := range []fencing.Token{{UID: "uid-a", Generation: 2}, {UID: "uid-a", Generation: 1}} {
		err := handle(tok)
		reason, _ := grpcstatus.Reason(err)
		fmt.Printf("%v: %v %v\n", tok, status.Code(err), reason)
	}
	// Output:
	// "uid-a"@2: OK ACCEPTED
	// "uid-a"@1: FailedPrecondition STALE_GENERATION
}
