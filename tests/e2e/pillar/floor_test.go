//go:build kernel

package pillar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillar-csi/pillar-csi/tests/e2e/cluster"
	"github.com/pillar-csi/pillar-csi/tests/e2e/deploy"
)

// The drivers TestPerformance measures pillar-csi against, in the same
// cluster boot: the floor driver (tests/e2e/cmd/floor-csi: CreateVolume
// returns at once, no attach, a tmpfs per pod) run with pillar-csi's own
// csi-provisioner container, image, flags and all, so that the difference
// is pillar-csi's work; and rancher's local-path-provisioner at the
// release tests/tools/localpath pins, deployed as upstream's
// deploy/local-path-storage.yaml does.
const (
	floorDriver     = "floor.csi.pillar-csi.io"
	floorNamespace  = "pillar-floor"
	floorClass      = "floor"
	floorImage      = "pillar-lab.local/floor-csi:e2e"
	localPathNS     = "local-path-storage"
	localPathClass  = "local-path"
	localPathImage  = "pillar-lab.local/local-path-provisioner:e2e"
	localPathVolDir = "/opt/local-path-provisioner"
)

// installFloor runs the floor driver: its controller beside a copy of
// pillar-csi's csi-provisioner container, its node plugin on every node,
// its CSIDriver (no attach) and the StorageClass floorClass (Immediate).
// Everything goes at the end of the test.
func installFloor(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	// pillar-csi's csi-provisioner container as the chart made it: image,
	// flags, environment, socket mount.
	raw := kubectl(t, c, "get", "deployment", "-n", deploy.Namespace, deploy.Release+"-controller", "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="csi-provisioner")]}`)
	var prov map[string]any
	if err := json.Unmarshal([]byte(raw), &prov); err != nil || prov["image"] == nil {
		t.Fatalf("pillar-csi's csi-provisioner container %q: %v", raw, err)
	}
	provJSON, err := json.Marshal(prov)
	if err != nil {
		t.Fatal(err)
	}
	kubeletDir := "/var/lib/kubelet"
	for _, a := range strings.Fields(kubectl(t, c, "get", "daemonset", "-n", deploy.Namespace, deploy.Release+"-node", "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="pillar-node")].args[*]}`)) {
		if v, ok := strings.CutPrefix(a, "-kubelet-dir="); ok {
			kubeletDir = strings.TrimSuffix(v, "/")
		}
	}
	runTool(t, c, "floor-csi", floorImage, floorObjects(string(provJSON), kubeletDir), floorNamespace, "deployment/floor-controller")
	wait(t, c, floorNamespace, "deployment/floor-controller", "condition=Available", 5*time.Minute)
	wait(t, c, floorNamespace, "daemonset/floor-node", "jsonpath={.status.numberReady}=1", 5*time.Minute)
	poll(t, "the floor driver registered on "+c.NodeName, 3*time.Minute, 2*time.Second, func() (bool, string) {
		out, err := c.Kubectl(ctx, nil, "get", "csinode", c.NodeName, "-o", "jsonpath={.spec.drivers[*].name}")
		return err == nil && strings.Contains(string(out), floorDriver), fmt.Sprintf("CSINode drivers %q (%v)", out, err)
	})
}

// runTool imports bin/<name> (make e2e-perf builds it) as the image ref,
// applies objects, and at the end of the test logs the last lines of
// workload in namespace ns and deletes the objects again.
func runTool(t *testing.T, c *cluster.Cluster, name, ref, objects, ns, workload string) {
	t.Helper()
	bin := filepath.Join(lab.root, "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v (make e2e-perf builds it)", err)
	}
	if err := c.ImportStatic(context.Background(), name, bin, ref); err != nil {
		t.Fatal(err)
	}
	apply(t, c, objects)
	t.Cleanup(func() {
		logKubectl(t, c, "logs", "-n", ns, workload, "--all-containers", "--tail=20")
		if out, err := c.Kubectl(context.Background(), []byte(objects), "delete", "-f", "-", "--wait=true", "--timeout=3m"); err != nil {
			t.Errorf("delete %s: %v\n%s", name, err, out)
		}
	})
}

// floorObjects are the floor driver's objects; provisioner is pillar-csi's
// csi-provisioner container as JSON, which YAML takes as it is.
func floorObjects(provisioner, kubeletDir string) string {
	plugins := kubeletDir + "/plugins/" + floorDriver
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: floor
  namespace: %[1]s
---
# The rights of pillar-csi's csi-provisioner (the chart's ClusterRole), and
# its leader-election lease here.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: pillar-floor-provisioner
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[2]s-provisioner}
subjects: [{kind: ServiceAccount, name: floor, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: leases
  namespace: %[1]s
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: leases
  namespace: %[1]s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leases}
subjects: [{kind: ServiceAccount, name: floor, namespace: %[1]s}]
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: %[3]s
spec:
  attachRequired: false
  podInfoOnMount: false
  volumeLifecycleModes: [Persistent]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %[4]s
provisioner: %[3]s
volumeBindingMode: Immediate
reclaimPolicy: Delete
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: floor-controller
  namespace: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: floor-controller}
  template:
    metadata:
      labels: {app: floor-controller}
    spec:
      serviceAccountName: floor
      containers:
        - name: floor-csi
          image: %[5]s
          imagePullPolicy: Never
          args: [-controller, -endpoint=unix:///csi/csi.sock]
          volumeMounts: [{name: socket-dir, mountPath: /csi}]
        - %[6]s
      volumes:
        - name: socket-dir
          emptyDir: {}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: floor-node
  namespace: %[1]s
spec:
  selector:
    matchLabels: {app: floor-node}
  template:
    metadata:
      labels: {app: floor-node}
    spec:
      containers:
        - name: floor-csi
          image: %[5]s
          imagePullPolicy: Never
          args:
            - -endpoint=unix:///csi/csi.sock
            - -node-id=$(NODE_NAME)
            - -plugin-registration-dir=/registration
            - -kubelet-registration-path=%[8]s/csi.sock
          env:
            - name: NODE_NAME
              valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
          securityContext: {privileged: true}
          volumeMounts:
            - {name: plugin-dir, mountPath: /csi}
            - {name: registration-dir, mountPath: /registration}
            - {name: kubelet-dir, mountPath: %[7]s, mountPropagation: Bidirectional}
      volumes:
        - {name: plugin-dir, hostPath: {path: %[8]s, type: DirectoryOrCreate}}
        - {name: registration-dir, hostPath: {path: %[7]s/plugins_registry, type: Directory}}
        - {name: kubelet-dir, hostPath: {path: %[7]s, type: Directory}}
`, floorNamespace, deploy.Release, floorDriver, floorClass, floorImage, provisioner, kubeletDir, plugins)
}

// installLocalPath runs local-path-provisioner as upstream's
// deploy/local-path-storage.yaml does (its RBAC, flags, scripts and
// helper pod), with two changes: the lab's images, and a shared
// filesystem path instead of a node path map, so that its StorageClass
// binds Immediate like the others (on one node the directories land in
// the same place; with a node path map it needs WaitForFirstConsumer and
// cannot bind a claim without a pod). Everything goes at the end of the
// test.
func installLocalPath(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	runTool(t, c, "local-path-provisioner", localPathImage, localPathObjects(), localPathNS, "deployment/local-path-provisioner")
	wait(t, c, localPathNS, "deployment/local-path-provisioner", "condition=Available", 5*time.Minute)
}

func localPathObjects() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: local-path-provisioner-service-account
  namespace: %[1]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: local-path-provisioner-role
  namespace: %[1]s
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: local-path-provisioner-role
rules:
  - apiGroups: [""]
    resources: ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["persistentvolumes"]
    verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "patch"]
  - apiGroups: ["storage.k8s.io"]
    resources: ["storageclasses"]
    verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: local-path-provisioner-bind
  namespace: %[1]s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-path-provisioner-role}
subjects: [{kind: ServiceAccount, name: local-path-provisioner-service-account, namespace: %[1]s}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: local-path-provisioner-bind
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: local-path-provisioner-role}
subjects: [{kind: ServiceAccount, name: local-path-provisioner-service-account, namespace: %[1]s}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: local-path-provisioner
  namespace: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: local-path-provisioner}
  template:
    metadata:
      labels: {app: local-path-provisioner}
    spec:
      serviceAccountName: local-path-provisioner-service-account
      containers:
        - name: local-path-provisioner
          image: %[2]s
          imagePullPolicy: Never
          command: [/local-path-provisioner, --debug, start, --config, /etc/config/config.json, --helper-image, %[3]s]
          volumeMounts: [{name: config-volume, mountPath: /etc/config/}]
          env:
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
            - name: CONFIG_MOUNT_PATH
              value: /etc/config/
      volumes:
        - name: config-volume
          configMap: {name: local-path-config}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: %[4]s
provisioner: rancher.io/local-path
volumeBindingMode: Immediate
reclaimPolicy: Delete
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: local-path-config
  namespace: %[1]s
data:
  config.json: |-
    {"sharedFileSystemPath": "%[5]s"}
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0777 -p "$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata:
      name: helper-pod
    spec:
      priorityClassName: system-node-critical
      tolerations:
        - key: node.kubernetes.io/disk-pressure
          operator: Exists
          effect: NoSchedule
      containers:
      - name: helper-pod
        image: %[3]s
        imagePullPolicy: IfNotPresent
`, localPathNS, localPathImage, cluster.BusyboxImage, localPathClass, localPathVolDir)
}
