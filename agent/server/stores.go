package server

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	agentv1 "github.com/pillar-csi/pillar-csi/api/agent/v1"
	"github.com/pillar-csi/pillar-csi/backends"
	"github.com/pillar-csi/pillar-csi/backends/command"
	"github.com/pillar-csi/pillar-csi/backends/lvm"
	"github.com/pillar-csi/pillar-csi/backends/zfs"
)

// storeKind is the backend of a store.
type storeKind uint8

const (
	kindZFS storeKind = iota + 1
	kindLVM
)

func (k storeKind) String() string {
	if k == kindZFS {
		return "zfs"
	}
	return "lvm"
}

// storeSpec is the full configuration of a store as a comparable value:
// the key of the backend cache. The PillarStore's name is not part of it
// (it is only for logs), so two names for the same pool share one backend.
type storeSpec struct {
	kind storeKind
	// ZFS.
	pool, parentDataset string
	sparse              bool
	properties          string // "k=v\x00" pairs, sorted by key
	// LVM.
	volumeGroup, thinPool string
	allowUnzeroed         bool // a thin pool that does not zero new chunks is accepted
}

func (s storeSpec) String() string {
	if s.kind == kindZFS {
		if s.parentDataset != "" {
			return "zfs:" + s.pool + "/" + s.parentDataset
		}
		return "zfs:" + s.pool
	}
	if s.thinPool != "" {
		return "lvm:" + s.volumeGroup + "/" + s.thinPool
	}
	return "lvm:" + s.volumeGroup
}

// parseStore turns a request's Store into a spec. A missing or empty store
// is INVALID_ARGUMENT (reported by the caller); the backends validate the
// names themselves when the backend is built.
func parseStore(st *agentv1.Store) (storeSpec, error) {
	if st == nil {
		return storeSpec{}, fmt.Errorf("store is required")
	}
	switch b := st.GetBackend().(type) {
	case *agentv1.Store_Zfs:
		z := b.Zfs
		if z == nil || z.GetPool() == "" {
			return storeSpec{}, fmt.Errorf("store %q: zfs.pool is required", st.GetName())
		}
		var props strings.Builder
		for _, k := range slices.Sorted(maps.Keys(z.GetProperties())) {
			v := z.GetProperties()[k]
			// NUL separates the pairs of the cache key; ZFS allows it in
			// neither names nor values.
			if strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) || strings.Contains(k, "=") {
				return storeSpec{}, fmt.Errorf("store %q: zfs property %q is not a ZFS property", st.GetName(), k)
			}
			props.WriteString(k + "=" + v + "\x00")
		}
		return storeSpec{kind: kindZFS, pool: z.GetPool(), parentDataset: z.GetParentDataset(),
			sparse: z.GetSparse(), properties: props.String()}, nil
	case *agentv1.Store_Lvm:
		l := b.Lvm
		if l == nil || l.GetVolumeGroup() == "" {
			return storeSpec{}, fmt.Errorf("store %q: lvm.volume_group is required", st.GetName())
		}
		return storeSpec{kind: kindLVM, volumeGroup: l.GetVolumeGroup(), thinPool: l.GetThinPool(),
			allowUnzeroed: l.GetAllowUnzeroedThinPool()}, nil
	}
	return storeSpec{}, fmt.Errorf("store %q: no backend (zfs or lvm) is set", st.GetName())
}

// zfsProperties decodes the properties parseStore encoded; nil when there
// are none.
func (s storeSpec) zfsProperties() map[string]string {
	var props map[string]string
	for kv := range strings.SplitSeq(strings.TrimSuffix(s.properties, "\x00"), "\x00") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if props == nil {
			props = map[string]string{}
		}
		props[k] = v
	}
	return props
}

// backendFactory builds the backend of a store.
type backendFactory func(storeSpec) (backends.Backend, error)

// realBackends builds ZFS and LVM backends that run their tools with
// runner; LVM never scans the devices reject matches.
func realBackends(runner command.InputRunner, reject []string) backendFactory {
	return func(s storeSpec) (backends.Backend, error) {
		if s.kind == kindZFS {
			return zfs.New(zfs.Config{Pool: s.pool, ParentDataset: s.parentDataset, Sparse: s.sparse,
				Properties: s.zfsProperties(), Runner: runner})
		}
		return lvm.New(lvm.Config{VolumeGroup: s.volumeGroup, ThinPool: s.thinPool, AllowUnzeroedThinPool: s.allowUnzeroed,
			RejectDevices: reject, Runner: runner})
	}
}

// maxStores bounds the store configurations the agent keeps a backend
// for. A store's configuration changes with every edit of its PillarStore
// (its ZFS properties are part of it), so over an agent's life the
// configurations only add up; a node serves a few at any time.
const maxStores = 64

// storeCache keeps one backend per store configuration, at most maxStores
// of them, dropping the one used least recently to make room. A backend
// serializes its own space accounting (thin admission under the overcommit
// rule), which is exact only if every call for the store goes through the
// same backend object: a configuration still in use is among the most
// recently used, so only one that a PillarStore's edit left behind is
// dropped, unless a node serves more than maxStores at once.
type storeCache struct {
	factory backendFactory
	slots   int // concurrent calls per store
	mu      sync.Mutex
	m       map[storeSpec]*cachedStore
	clock   uint64 // counts uses, for least recently used
}

type cachedStore struct {
	b        backends.Backend
	lastUsed uint64
}

func newStoreCache(f backendFactory, slots int) *storeCache {
	return &storeCache{factory: f, slots: slots, m: map[storeSpec]*cachedStore{}}
}

// get returns the backend of spec, building it on first use. An invalid
// configuration is not cached.
func (c *storeCache) get(spec storeSpec) (backends.Backend, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clock++
	if e, ok := c.m[spec]; ok {
		e.lastUsed = c.clock
		return e.b, nil
	}
	b, err := c.factory(spec)
	if err != nil {
		return nil, err
	}
	if len(c.m) >= maxStores {
		var oldest storeSpec
		var at uint64 = math.MaxUint64
		for k, e := range c.m {
			if e.lastUsed < at {
				oldest, at = k, e.lastUsed
			}
		}
		delete(c.m, oldest)
	}
	lb := limit(b, c.slots)
	c.m[spec] = &cachedStore{b: lb, lastUsed: c.clock}
	return lb, nil
}
