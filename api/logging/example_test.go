package logging_test

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"

	"github.com/pillar-csi/pillar-csi/api/logging"
)

// A binary registers the shared flags, builds its logger from them and
// logs its gRPC calls with the shared interceptor.
func Example() {
	level, format := slog.LevelInfo, logging.FormatJSON
	fs := flag.NewFlagSet("pillar-example", flag.ContinueOnError)
	logging.AddFlags(fs, &level, &format)
	if err := fs.Parse([]string{"-log-format=text", "-log-level=debug"}); err != nil {
		fmt.Println(err)
		return
	}
	log, err := logging.New(os.Stderr, level, format)
	if err != nil {
		fmt.Println(err)
		return
	}
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(
		logging.UnaryServerInterceptor(log, "/csi.v1.Identity/Probe")))
	defer g.Stop()
	fmt.Println(level, format)
	// Output: DEBUG text
}
