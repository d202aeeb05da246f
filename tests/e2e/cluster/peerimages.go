package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/kernelvm/guest"
)

// The images a test imports once the cluster runs (the stand-ins of the
// Kubernetes e2e suite's test images) are needed on every node a pod may
// go to. In a two-guest run the main guest hands each such tarball to the
// peer through the share, in peerImageDir, and waits until the peer has
// imported it (a marker next to the tarball, or one that names the
// error). The peer imports every tarball there at each boot too: its
// containerd keeps images on tmpfs, so a power cut loses them.
const (
	peerImageDir     = "peer-images"
	peerImported     = ".imported"
	peerImportFailed = ".error"
)

func peerImages() string { return filepath.Join(guest.ShareDir, peerImageDir) }

// importTestImage imports a tarball the harness wrote while the cluster
// runs, on this node and, in a two-guest run, on the peer's.
func (c *Cluster) importTestImage(ctx context.Context, tarball string) error {
	if err := c.importImage(ctx, tarball); err != nil {
		return err
	}
	if c.PeerName == "" {
		return nil
	}
	return handToPeer(ctx, peerImages(), tarball, 5*time.Minute, c.PeerFailed)
}

// handToPeer copies tarball into dir and waits until the peer reports it
// imported, failed to import it, or failed altogether (peerFailed).
func handToPeer(ctx context.Context, dir, tarball string, timeout time.Duration, peerFailed func() error) error {
	b, err := os.ReadFile(tarball)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("hand %s to the peer: %w", tarball, err)
	}
	dst := filepath.Join(dir, filepath.Base(tarball))
	if err := guest.WriteFileAtomic(dst, b); err != nil {
		return fmt.Errorf("hand %s to the peer: %w", tarball, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if _, err := os.Stat(dst + peerImported); err == nil {
			return nil
		}
		if msg, err := os.ReadFile(dst + peerImportFailed); err == nil {
			return fmt.Errorf("the peer could not import %s: %s", filepath.Base(tarball), strings.TrimSpace(string(msg)))
		}
		if err := peerFailed(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the peer to import %s: %w", filepath.Base(tarball), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// importHanded imports the tarballs in dir: all of them (a boot), or
// only those the peer has not answered yet. Each import is answered with
// a marker; the first failure is returned after the rest were tried.
func importHanded(ctx context.Context, dir string, all bool, imp func(context.Context, string) error) error {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tars {
		if !all && (exists(t+peerImported) || exists(t+peerImportFailed)) {
			continue
		}
		marker, body := t+peerImported, "imported\n"
		if err := imp(ctx, t); err != nil {
			errs = append(errs, err)
			marker, body = t+peerImportFailed, err.Error()+"\n"
		}
		if err := guest.WriteFileAtomic(marker, []byte(body)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ServeImports imports, until ctx ends, the image tarballs the main guest
// hands the peer while the cluster runs. It runs in the peer guest once
// Join returned, and returns ctx's error.
func (c *Cluster) ServeImports(ctx context.Context) error {
	for {
		if err := importHanded(ctx, peerImages(), false, c.importImage); err != nil {
			fmt.Fprintf(c.opts.Log, "cluster: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
