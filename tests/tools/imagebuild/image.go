package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// defaultPath is the PATH of every image: Debian's, so that tools from
// packages are found whether they ship in /sbin or /usr/sbin.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildOptions are one build's inputs besides the definition.
type buildOptions struct {
	Root   string            // relative file sources are resolved against it
	Out    string            // outputs go here
	Tag    string            // for definitions without a tag of their own
	Labels map[string]string // override the definition's
	Epoch  time.Time         // mtimes and created
	Cache  *debCache
}

// Result describes a built image; build writes it to <name>.json.
type Result struct {
	Reference string `json:"reference"`
	// Digest is the OCI manifest's, as in <name>.oci/index.json.
	Digest string `json:"digest"`
	// ID is the config's digest: the image ID that containerd and kubelet
	// show, the same whichever archive format the image was imported from.
	ID string `json:"id"`
	// Size is the compressed size (manifest, config and layer);
	// RootfsSize the uncompressed layer.
	Size       int64 `json:"size"`
	RootfsSize int64 `json:"rootfsSize"`
}

// build assembles def's root filesystem, verifies it and writes the image
// as <name>.tar (docker-archive), <name>.oci/ (OCI layout), <name>.rootfs/
// and <name>.json under o.Out. Outputs are replaced only once all of them
// are ready, so a failed build leaves the previous ones intact.
func build(ctx context.Context, def *Definition, o buildOptions) (*Result, error) {
	ref, err := reference(def, o.Tag)
	if err != nil {
		return nil, err
	}
	// Absolute: dpkg-deb and chroot run in / and get these paths.
	if o.Out, err = filepath.Abs(o.Out); err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	work, err := os.MkdirTemp(o.Out, "."+def.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	defer os.RemoveAll(work)

	rootfs := filepath.Join(work, "rootfs")
	if err := assembleRootfs(ctx, def, o.Root, rootfs, o.Cache); err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	if err := verifyRootfs(rootfs); err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}

	layerPath := filepath.Join(work, "layer.tar.gz")
	lf, err := os.Create(layerPath)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	rootfsSize, err := writeLayer(lf, rootfs, o.Epoch)
	if cerr := lf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}

	img, err := assembleImage(def, ref, layerPath, o)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	res, err := describe(img, ref, rootfsSize)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}

	archive := filepath.Join(work, "image.tar")
	if err := tarball.WriteToFile(archive, ref, img); err != nil {
		return nil, fmt.Errorf("build %s: docker archive: %w", def.Name, err)
	}
	oci := filepath.Join(work, "image.oci")
	p, err := layout.Write(oci, empty.Index)
	if err == nil {
		err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
			// The OCI convention (the tag) and containerd's (the full name),
			// so that both `ctr import` and OCI tools name the image.
			"org.opencontainers.image.ref.name": ref.TagStr(),
			"io.containerd.image.name":          ref.String(),
		}))
	}
	if err != nil {
		return nil, fmt.Errorf("build %s: OCI layout: %w", def.Name, err)
	}
	summary, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}
	if err := os.WriteFile(filepath.Join(work, "image.json"), append(summary, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("build %s: %w", def.Name, err)
	}

	for from, to := range map[string]string{
		rootfs: def.Name + ".rootfs", archive: def.Name + ".tar", oci: def.Name + ".oci",
		filepath.Join(work, "image.json"): def.Name + ".json",
	} {
		to = filepath.Join(o.Out, to)
		if err := os.RemoveAll(to); err != nil {
			return nil, fmt.Errorf("build %s: %w", def.Name, err)
		}
		if err := os.Rename(from, to); err != nil {
			return nil, fmt.Errorf("build %s: %w", def.Name, err)
		}
	}
	return res, nil
}

// reference is the image's name: the definition's tag if it pins one,
// else tag (our images follow the build's version).
func reference(def *Definition, tag string) (name.Tag, error) {
	switch {
	case def.Tag != "" && tag != "":
		return name.Tag{}, fmt.Errorf("image %s pins tag %q; do not pass -tag %q for it", def.Name, def.Tag, tag)
	case def.Tag != "":
		tag = def.Tag
	case tag == "":
		return name.Tag{}, fmt.Errorf("image %s has no tag: pass -tag", def.Name)
	}
	ref, err := name.NewTag(def.Image+":"+tag, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("image %s: %w", def.Name, err)
	}
	return ref, nil
}

// assembleImage is the one-layer OCI image: OCI media types throughout, so
// that the digest in the OCI layout is the one a registry would show.
func assembleImage(def *Definition, ref name.Tag, layerPath string, o buildOptions) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(layerPath) },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for _, p := range def.Packages {
		pkgs = append(pkgs, p.Deb)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.Epoch},
			CreatedBy: "imagebuild deploy/images/" + def.Name,
			Comment:   strings.Join(pkgs, " "),
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	labels := maps.Clone(def.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, o.Labels)
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: o.Epoch}
	cf.Config = v1.Config{
		Entrypoint: def.Entrypoint,
		Cmd:        def.Cmd,
		Env:        append([]string{defaultPath}, def.Env...),
		Labels:     labels,
		WorkingDir: "/",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	// The OCI pre-defined annotations (licences, source, version,
	// revision...) go on the manifest too, where registries and
	// scanners read them without fetching the config.
	ann := map[string]string{}
	for k, v := range labels {
		if strings.HasPrefix(k, "org.opencontainers.image.") {
			ann[k] = v
		}
	}
	if len(ann) == 0 {
		return img, nil
	}
	return mutate.Annotations(img, ann).(v1.Image), nil
}

func describe(img v1.Image, ref name.Tag, rootfsSize int64) (*Result, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	id, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	size := int64(len(manifest) + len(config))
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return nil, err
		}
		size += n
	}
	return &Result{Reference: ref.String(), Digest: digest.String(), ID: id.String(), Size: size, RootfsSize: rootfsSize}, nil
}
