package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

type volReq struct{ id string }

func (r volReq) GetVolumeId() string { return r.id }

// secretReq is a request whose secrets must never reach the log.
type secretReq struct {
	volReq
	Secrets map[string]string
}

func TestInterceptorLevelsAndFields(t *testing.T) {
	const quiet = "/csi.v1.Identity/Probe"
	tcpPeer := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 3), Port: 50040}}
	for _, tc := range []struct {
		name      string
		method    string
		req       any
		peer      *peer.Peer
		err       error
		level     slog.Level // lowest level the logger is set to
		wantLevel string     // "" when nothing may be logged
		wantVol   string
		wantPeer  string
	}{
		{name: "quiet success at info is not logged", method: quiet, level: slog.LevelInfo},
		{name: "quiet success at debug", method: quiet, level: slog.LevelDebug, wantLevel: "DEBUG"},
		{name: "quiet failure is info", method: quiet, err: status.Error(codes.FailedPrecondition, "not ready"), level: slog.LevelInfo, wantLevel: "INFO"},
		{name: "success", method: "/csi.v1.Node/NodeStageVolume", req: volReq{"pvc-9"}, peer: tcpPeer, level: slog.LevelInfo, wantLevel: "INFO", wantVol: "pvc-9", wantPeer: "10.0.0.3:50040"},
		{name: "refusal is info", method: "/csi.v1.Node/NodeStageVolume", req: volReq{"pvc-9"}, err: status.Error(codes.Aborted, "busy"), level: slog.LevelInfo, wantLevel: "INFO", wantVol: "pvc-9"},
		{name: "refusal is not an error", method: "/x/Y", err: status.Error(codes.NotFound, "gone"), level: slog.LevelWarn},
		{name: "internal failure", method: "/x/Y", req: volReq{"pvc-9"}, err: status.Error(codes.Internal, "EBUSY"), level: slog.LevelWarn, wantLevel: "ERROR", wantVol: "pvc-9"},
		{name: "a plain error is UNKNOWN", method: "/x/Y", err: io.ErrUnexpectedEOF, level: slog.LevelWarn, wantLevel: "ERROR"},
		{name: "data loss", method: "/x/Y", err: status.Error(codes.DataLoss, "torn"), level: slog.LevelInfo, wantLevel: "ERROR"},
		{name: "empty volume ID is left out", method: "/x/Y", req: volReq{""}, level: slog.LevelInfo, wantLevel: "INFO"},
		{name: "peer without an address", method: "/x/Y", peer: &peer.Peer{}, level: slog.LevelInfo, wantLevel: "INFO"},
		{name: "unnamed unix socket peer", method: "/x/Y", peer: &peer.Peer{Addr: &net.UnixAddr{Name: "@", Net: "unix"}}, level: slog.LevelInfo, wantLevel: "INFO"},
		{name: "named unix socket peer", method: "/x/Y", peer: &peer.Peer{Addr: &net.UnixAddr{Name: "/run/c.sock", Net: "unix"}}, level: slog.LevelInfo, wantLevel: "INFO", wantPeer: "/run/c.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			ic := UnaryServerInterceptor(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level})), quiet)
			ctx := context.Background()
			if tc.peer != nil {
				ctx = peer.NewContext(ctx, tc.peer)
			}
			_, err := ic(ctx, tc.req, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { return nil, tc.err })
			if err != tc.err {
				t.Fatalf("interceptor changed the error to %v", err)
			}
			if tc.wantLevel == "" {
				if buf.Len() != 0 {
					t.Fatalf("logged %s", buf.String())
				}
				return
			}
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("log %q: %v", buf.String(), err)
			}
			if rec["msg"] != "rpc" || rec["level"] != tc.wantLevel || rec["method"] != tc.method || rec["code"] != status.Code(tc.err).String() {
				t.Errorf("record %v: want rpc at %s, method %s, code %s", rec, tc.wantLevel, tc.method, status.Code(tc.err))
			}
			if v, _ := rec["volume_id"].(string); v != tc.wantVol {
				t.Errorf("volume_id %q, want %q", v, tc.wantVol)
			}
			if p, _ := rec["peer"].(string); p != tc.wantPeer {
				t.Errorf("peer %q, want %q", p, tc.wantPeer)
			}
			if _, ok := rec["duration_seconds"].(float64); !ok {
				t.Errorf("no duration_seconds in %v", rec)
			}
			if msg, _ := rec["error"].(string); msg != status.Convert(tc.err).Message() {
				t.Errorf("error field %q, want %q", msg, status.Convert(tc.err).Message())
			}
		})
	}
}

func TestInterceptorNeverLogsTheRequest(t *testing.T) {
	var buf bytes.Buffer
	ic := UnaryServerInterceptor(slog.New(slog.NewTextHandler(&buf, nil)))
	req := secretReq{volReq{"pvc-1"}, map[string]string{"password": "hunter2"}}
	_, _ = ic(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Node/NodeStageVolume"},
		func(context.Context, any) (any, error) { return nil, status.Error(codes.Internal, "failed") })
	if out := buf.String(); !strings.Contains(out, "volume_id=pvc-1") || strings.Contains(out, "hunter2") {
		t.Fatalf("log %q: want the volume ID and no secret", out)
	}
}

func TestFlagsAndNew(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr bool
		json    bool
		debug   bool
	}{
		{args: nil, json: true},
		{args: []string{"-log-format=text"}},
		{args: []string{"-log-format", "json", "-log-level", "debug"}, json: true, debug: true},
		{args: []string{"-log-level=DEBUG"}, json: true, debug: true},
		{args: []string{"-log-format=yaml"}, wantErr: true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			level, format := slog.LevelInfo, FormatJSON
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			AddFlags(fs, &level, &format)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			log, err := New(&buf, level, format)
			if tc.wantErr {
				if err == nil || !strings.HasPrefix(err.Error(), "-log-format: ") {
					t.Fatalf("New = %v, want a -log-format error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.Debug("d")
			log.Info("i", "k", "v")
			out := buf.String()
			if got := strings.HasPrefix(out, "{"); got != tc.json {
				t.Errorf("JSON %v, want %v: %q", got, tc.json, out)
			}
			if got := strings.Contains(out, "DEBUG"); got != tc.debug {
				t.Errorf("debug logged %v, want %v: %q", got, tc.debug, out)
			}
		})
	}
}

func TestBadLogLevelNamesTheFlag(t *testing.T) {
	level, format := slog.LevelInfo, FormatJSON
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	AddFlags(fs, &level, &format)
	if err := fs.Parse([]string{"-log-level=loud"}); err == nil || !strings.Contains(err.Error(), "-log-level") {
		t.Fatalf("Parse = %v, want an error naming -log-level", err)
	}
}
