package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/pillar-csi/pillar-csi/configfs"
)

func TestParseApply(t *testing.T) {
	c, err := parse([]string{"apply", "-nqn", "nqn.2024-01.org.example:disk", "-device", "/dev/loop0",
		"-addr", "fd00::1", "-host", "nqn.2024-01.org.example:h1", "-host", "nqn.2024-01.org.example:h2"})
	if err != nil {
		t.Fatal(err)
	}
	want := configfs.Export{
		NQN:          "nqn.2024-01.org.example:disk",
		Namespaces:   []configfs.Namespace{{NSID: 1, DevicePath: "/dev/loop0", Enabled: true}},
		Ports:        []configfs.Address{{TrType: "tcp", AdrFam: "ipv6", TrAddr: "fd00::1", TrSvcID: "4420"}},
		AllowedHosts: []string{"nqn.2024-01.org.example:h1", "nqn.2024-01.org.example:h2"},
	}
	if diff := cmp.Diff(want, c.export()); diff != "" {
		t.Errorf("export (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"apply", "-nqn", "nqn.2024-01.org.example:disk"},
		{"remove"},
		{"show", "-bogus"},
	} {
		if _, err := parse(args); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
}

func TestShowAndBadInput(t *testing.T) {
	root := t.TempDir()
	sub := filepath.Join(root, "nvmet/subsystems/nqn.2024-01.org.example:disk")
	for _, d := range []string{"nvmet/ports", "nvmet/hosts", "nvmet/subsystems/nqn.2024-01.org.example:disk/namespaces/1"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]string{"attr_allow_any_host": "1\n", "namespaces/1/device_path": "/dev/loop0\n", "namespaces/1/enable": "1\n"} {
		if err := os.WriteFile(filepath.Join(sub, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	c, _ := parse([]string{"show", "-root", root})
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatal(err)
	}
	want := "subsystem nqn.2024-01.org.example:disk (any host)\n  namespace 1 /dev/loop0 enabled=true\n"
	if out.String() != want {
		t.Errorf("show printed %q, want %q", out.String(), want)
	}

	c, _ = parse([]string{"apply", "-root", root, "-nqn", "bad", "-device", "/dev/loop0", "-addr", "127.0.0.1"})
	if err := run(context.Background(), c, &out); !configfs.IsInvalid(err) {
		t.Errorf("apply with a bad NQN = %v, want an invalid-configuration error", err)
	}
}
