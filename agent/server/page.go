package server

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
)

// pageBytes is where a list response's page ends early, whatever its
// size: three quarters of the message limit leaves room for the rest of
// the response and gRPC's framing.
const pageBytes = agentv1.MaxMessageSize / 4 * 3

// page returns the entries of items (ordered by volume ID) after the
// volume ID token, at most size of them (0: MaxListPageSize) and no more
// than pageBytes together, and the token of the next page, empty when
// none follows. The token is the last volume ID returned, so a page
// continues after it however the list changed in between, and no entry
// is listed twice.
func page[T proto.Message](op string, items []T, id func(T) string, size int32, token string) ([]T, string, error) {
	switch {
	case size < 0 || size > agentv1.MaxListPageSize:
		return nil, "", status.Errorf(codes.InvalidArgument, "%s: page_size %d: want 0 to %d", op, size, agentv1.MaxListPageSize)
	case size == 0:
		size = agentv1.MaxListPageSize
	}
	if token != "" {
		if err := validateVolumeID(op+" page_token", token); err != nil {
			return nil, "", err
		}
	}
	start := 0
	for start < len(items) && token != "" && strings.Compare(id(items[start]), token) <= 0 {
		start++
	}
	var out []T
	bytes := 0
	for i := start; i < len(items); i++ {
		n := proto.Size(items[i])
		if len(out) == int(size) || (len(out) > 0 && bytes+n > pageBytes) {
			return out, id(out[len(out)-1]), nil
		}
		out = append(out, items[i])
		bytes += n
	}
	return out, "", nil
}
