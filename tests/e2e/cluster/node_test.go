package cluster

import (
	"regexp"
	"testing"

	"github.com/pillar-csi/pillar-csi/api/export"
)

// Every node of the lab has a host identity of its own, the same on each
// of its boots, in the form nvme gen-hostnqn gives.
func TestHostIdentity(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]string{}
	for _, name := range []string{"pillar-lab", "pillar-storage", "node-3"} {
		nqn, id := hostIdentity(name)
		if again, _ := hostIdentity(name); again != nqn {
			t.Errorf("%s: host NQN %s, then %s", name, nqn, again)
		}
		if !uuid.MatchString(id) || nqn != "nqn.2014-08.org.nvmexpress:uuid:"+id {
			t.Errorf("%s: host NQN %q, host ID %q", name, nqn, id)
		}
		if err := export.ValidateNQN(nqn); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if other, ok := seen[nqn]; ok {
			t.Errorf("%s and %s share host NQN %s", name, other, nqn)
		}
		seen[nqn] = name
	}
}
