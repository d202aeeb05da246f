package configfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

func TestErrorHelpers(t *testing.T) {
	wrap := func(errno error) error {
		// Callers may wrap further; the helpers see through it.
		return fmt.Errorf("export vol-1: %w", &Error{Op: "write", Path: "/x/enable", Err: errno})
	}
	for _, c := range []struct {
		err                            error
		notExist, exist, busy, invalid bool
	}{
		{err: wrap(syscall.ENOENT), notExist: true},
		{err: wrap(syscall.EEXIST), exist: true},
		{err: wrap(syscall.EBUSY), busy: true},
		{err: wrap(syscall.ENOTEMPTY), busy: true},
		{err: wrap(syscall.EACCES)},
		{err: wrap(syscall.EINVAL), invalid: true},
		{err: invalidf("NQN", "bad"), invalid: true},
		{err: wrap(context.DeadlineExceeded)},
		{err: nil},
	} {
		got := [4]bool{IsNotExist(c.err), IsExist(c.err), IsBusy(c.err), IsInvalid(c.err)}
		if want := [4]bool{c.notExist, c.exist, c.busy, c.invalid}; got != want {
			t.Errorf("%v: IsNotExist/IsExist/IsBusy/IsInvalid = %v, want %v", c.err, got, want)
		}
	}
	var e *Error
	if err := wrap(syscall.EBUSY); !errors.As(err, &e) || e.Path != "/x/enable" || e.Err != syscall.EBUSY {
		t.Errorf("errors.As lost the fields: %#v", e)
	}
	if got := (&Error{Op: "apply", Err: context.Canceled}).Error(); got != "configfs: apply: context canceled" {
		t.Errorf("message without a path = %q", got)
	}
	if got := wrap(syscall.EBUSY).Error(); got != "export vol-1: configfs: write /x/enable: device or resource busy" {
		t.Errorf("message = %q", got)
	}
}
