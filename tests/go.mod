module github.com/pillar-csi/pillar-csi/tests

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.13.0
	github.com/pillar-csi/pillar-csi/api v0.0.0
	github.com/pillar-csi/pillar-csi/backends v0.0.0
	github.com/pillar-csi/pillar-csi/configfs v0.0.0
	github.com/pillar-csi/pillar-csi/csidriver v0.0.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/google/renameio/v2 v2.0.2 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/pillar-csi/pillar-csi/agent v0.0.0
	github.com/pillar-csi/pillar-csi/fencing v0.0.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.50.0
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/mount-utils v0.37.2 // indirect
	k8s.io/utils v0.0.0-20260626114624-be93311217bd // indirect
)

replace github.com/pillar-csi/pillar-csi/backends => ../backends

replace github.com/pillar-csi/pillar-csi/api => ../api

replace github.com/pillar-csi/pillar-csi/configfs => ../configfs

replace github.com/pillar-csi/pillar-csi/csidriver => ../csidriver

replace github.com/pillar-csi/pillar-csi/agent => ../agent

replace github.com/pillar-csi/pillar-csi/fencing => ../fencing
