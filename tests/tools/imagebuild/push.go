package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// chartValues says where the Helm chart (deploy/charts/pillar-csi) takes
// each image's repository, tag and digest from: the values path of its
// image block. Images that are not in the chart (the lab's pause) are not
// pushed.
var chartValues = map[string][]string{
	"pillar-controller":   {"controller", "image"},
	"csi-provisioner":     {"controller", "provisioner", "image"},
	"csi-attacher":        {"controller", "attacher", "image"},
	"csi-resizer":         {"controller", "resizer", "image"},
	"csi-snapshotter":     {"controller", "snapshotter", "image"},
	"snapshot-controller": {"snapshots", "controller", "image"},
	"pillar-agent":        {"agent", "image"},
	"pillar-node":         {"node", "image"},
}

// pushOptions are push's flags.
type pushOptions struct {
	Images   string // the build's -out: <name>.oci/ and <name>.json
	Registry string // host[:port][/path]
	Insecure bool   // plain HTTP
	Values   string // the values file to write
	Timeout  time.Duration
	Log      io.Writer
	// Transport is remote.DefaultTransport if nil (tests set their
	// server's). Credentials come from the Docker config, as for docker
	// and crane.
	Transport http.RoundTripper
}

// pushed is one image as it now is in the registry.
type pushed struct {
	Name, Repository, Tag, Digest string
}

// registryPattern is host[:port][/path] with no scheme, tag or digest: what
// a user types for REGISTRY.
var registryPattern = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

func runPush(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	var o pushOptions
	fs.StringVar(&o.Images, "images", "bin/images", "directory the images were built into (build's -out)")
	fs.StringVar(&o.Registry, "registry", "", "registry and path to push to: host[:port][/path] (required)")
	fs.BoolVar(&o.Insecure, "insecure", false, "the registry speaks plain HTTP (never the default)")
	fs.StringVar(&o.Values, "values", "", "write a Helm values file that points the chart at exactly what was pushed")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "timeout of each image's push")
	_ = fs.Parse(args)
	o.Log = os.Stdout
	names := fs.Args()
	if len(names) == 0 {
		names = chartNames()
	}
	_, err := push(ctx, o, names)
	return err
}

// push copies each named image from o.Images to o.Registry under its
// built tag, checks that the registry now serves the manifest digest that
// was built, and writes o.Values.
func push(ctx context.Context, o pushOptions, names []string) ([]pushed, error) {
	if !registryPattern.MatchString(o.Registry) {
		return nil, fmt.Errorf("registry %q: want host[:port][/path], lower-case path, no scheme, tag or digest (e.g. registry.example:5000/pillar-csi)", o.Registry)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	tr := o.Transport
	if tr == nil {
		tr = remote.DefaultTransport
	}
	if !o.Insecure {
		tr = tlsOnly{tr}
	}
	ropts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithTransport(tr)}
	slices.Sort(names)
	for _, n := range names {
		if _, ok := chartValues[n]; !ok {
			return nil, fmt.Errorf("%s is not an image of the chart (want one of %s)", n, strings.Join(chartNames(), ", "))
		}
	}
	var out []pushed
	for _, n := range names {
		p, err := pushOne(ctx, o, n, nameOpts, ropts)
		if err != nil {
			return nil, fmt.Errorf("push %s: %w", n, err)
		}
		fmt.Fprintf(o.Log, "%s:%s@%s\n", p.Repository, p.Tag, p.Digest)
		out = append(out, p)
	}
	if o.Values != "" {
		if err := writeValues(o.Values, o.Registry, out); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "values for the chart: %s\n", o.Values)
	}
	return out, nil
}

func pushOne(ctx context.Context, o pushOptions, n string, nameOpts []name.Option, ropts []remote.Option) (pushed, error) {
	raw, err := os.ReadFile(filepath.Join(o.Images, n+".json"))
	if err != nil {
		return pushed{}, fmt.Errorf("%w (make images builds it)", err)
	}
	var built Result
	if err := json.Unmarshal(raw, &built); err != nil {
		return pushed{}, fmt.Errorf("%s.json: %w", n, err)
	}
	src, err := name.NewTag(built.Reference)
	if err != nil {
		return pushed{}, fmt.Errorf("%s.json: %w", n, err)
	}
	img, err := layoutImage(filepath.Join(o.Images, n+".oci"))
	if err != nil {
		return pushed{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return pushed{}, err
	}
	if d.String() != built.Digest {
		return pushed{}, fmt.Errorf("%s.oci holds %s but %s.json says %s: build the images again", n, d, n, built.Digest)
	}
	repo := o.Registry + "/" + path.Base(src.RepositoryStr())
	dst, err := name.NewTag(repo+":"+src.TagStr(), nameOpts...)
	if err != nil {
		return pushed{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	opts := append([]remote.Option{remote.WithContext(ctx)}, ropts...)
	if err := remote.Write(dst, img, opts...); err != nil {
		return pushed{}, err
	}
	// What the chart will pull is the digest: ask the registry for it.
	byDigest, err := name.NewDigest(repo+"@"+d.String(), nameOpts...)
	if err != nil {
		return pushed{}, err
	}
	desc, err := remote.Head(byDigest, opts...)
	if err != nil {
		return pushed{}, fmt.Errorf("reading back %s: %w", byDigest, err)
	}
	if desc.Digest != d {
		return pushed{}, fmt.Errorf("the registry serves %s for %s", desc.Digest, byDigest)
	}
	return pushed{Name: n, Repository: repo, Tag: src.TagStr(), Digest: d.String()}, nil
}

// tlsOnly refuses plain HTTP. go-containerregistry falls back to it by
// itself for registries on loopback or private addresses, where a user
// who did not ask for it must be told instead.
type tlsOnly struct{ http.RoundTripper }

func (t tlsOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" {
		return nil, fmt.Errorf("%s does not answer over HTTPS; push over plain HTTP only on purpose (make push INSECURE=1, imagebuild push -insecure)", r.URL.Host)
	}
	return t.RoundTripper.RoundTrip(r)
}

// layoutImage is the one image of an OCI layout that build wrote.
func layoutImage(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w (make images builds it)", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d manifests, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

// writeValues writes the chart values that name every pushed image by
// repository, tag and digest.
func writeValues(file, registry string, images []pushed) error {
	values := map[string]any{}
	for _, p := range images {
		keys := chartValues[p.Name]
		m := values
		for _, k := range keys[:len(keys)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[keys[len(keys)-1]] = map[string]any{"repository": p.Repository, "tag": p.Tag, "digest": p.Digest}
	}
	body, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	head := "# The images make push pushed to " + registry + ", by digest:\n" +
		"#   helm install ... -f " + filepath.Base(file) + "\n"
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append([]byte(head), body...), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

func chartNames() []string {
	return slices.Sorted(maps.Keys(chartValues))
}
