package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// The values of -log-format.
const (
	FormatJSON = "json"
	FormatText = "text"
)

// AddFlags registers -log-level and -log-format on fs, writing to level
// and format; their current values are the defaults shown in the usage.
func AddFlags(fs *flag.FlagSet, level *slog.Level, format *string) {
	fs.TextVar(level, "log-level", *level, "lowest log `level`: debug, info, warn or error")
	fs.StringVar(format, "log-format", *format, "log `format`: json or text")
}

// CheckFormat reports whether format is a -log-format value.
func CheckFormat(format string) error {
	switch format {
	case FormatJSON, FormatText:
		return nil
	}
	return fmt.Errorf("%q is neither json nor text", format)
}

// New returns the logger of a binary: records of level and above, written
// to w as JSON lines or as slog's key=value text.
func New(w io.Writer, level slog.Level, format string) (*slog.Logger, error) {
	if err := CheckFormat(format); err != nil {
		return nil, fmt.Errorf("-log-format: %w", err)
	}
	ho := &slog.HandlerOptions{Level: level}
	if format == FormatText {
		return slog.New(slog.NewTextHandler(w, ho)), nil
	}
	return slog.New(slog.NewJSONHandler(w, ho)), nil
}
