package logging

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// UnaryServerInterceptor logs one record per unary call to log, in the
// shape the package documents. quiet are full method names
// ("/csi.v1.Identity/Probe") whose successes are logged at debug; any
// method not named, including one added to an API later, is logged at
// info. A nil log means slog.Default().
func UnaryServerInterceptor(log *slog.Logger, quiet ...string) grpc.UnaryServerInterceptor {
	if log == nil {
		log = slog.Default()
	}
	q := make(map[string]bool, len(quiet))
	for _, m := range quiet {
		q[m] = true
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		level := callLevel(err, q[info.FullMethod])
		// The record costs more than the call for a polled read; skip
		// building it when nobody reads it.
		if !log.Enabled(ctx, level) {
			return resp, err
		}
		st := status.Convert(err)
		attrs := make([]slog.Attr, 0, 6)
		attrs = append(attrs,
			slog.String("method", info.FullMethod),
			slog.String("code", st.Code().String()),
			slog.Float64("duration_seconds", time.Since(start).Seconds()))
		if v, ok := req.(interface{ GetVolumeId() string }); ok && v.GetVolumeId() != "" {
			attrs = append(attrs, slog.String("volume_id", v.GetVolumeId()))
		}
		if a := peerAddr(ctx); a != "" {
			attrs = append(attrs, slog.String("peer", a))
		}
		if err != nil {
			attrs = append(attrs, slog.String("error", st.Message()))
		}
		log.LogAttrs(ctx, level, "rpc", attrs...)
		return resp, err
	}
}

// peerAddr is the caller's address, or "" when it says nothing: a unix
// socket's client is unnamed, which Go prints as "@", and kubelet and the
// sidecars reach the CSI services only that way.
func peerAddr(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a := p.Addr.String(); a != "@" {
		return a
	}
	return ""
}

// callLevel is the level of a call's record (see the package doc).
func callLevel(err error, quiet bool) slog.Level {
	switch status.Code(err) {
	case codes.OK:
		if quiet {
			return slog.LevelDebug
		}
		return slog.LevelInfo
	case codes.Internal, codes.Unknown, codes.DataLoss:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
