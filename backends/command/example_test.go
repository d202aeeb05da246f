package command_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pillar-csi/pillar-csi/backends/command"
)

// A failed command keeps its exit status and standard error.
func ExampleExec() {
	r := command.Exec{Timeout: 10 * time.Second}
	_, err := r.Run(context.Background(), "sh", "-c", "echo 'cannot open tank/x: dataset does not exist' >&2; exit 1")
	var ce *command.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.ExitCode)
		fmt.Print(ce.Stderr)
	}
	// Output:
	// 1
	// cannot open tank/x: dataset does not exist
}
