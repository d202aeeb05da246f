module github.com/pillar-csi/pillar-csi/agent

go 1.26.0

require (
	github.com/pillar-csi/pillar-csi/api v0.0.0
	github.com/pillar-csi/pillar-csi/backends v0.0.0
	github.com/pillar-csi/pillar-csi/configfs v0.0.0
	github.com/pillar-csi/pillar-csi/fencing v0.0.0
	github.com/prometheus/client_golang v1.24.0
	golang.org/x/sys v0.50.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/renameio/v2 v2.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.70.0 // indirect
	github.com/prometheus/procfs v0.21.1 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

replace (
	github.com/pillar-csi/pillar-csi/api => ../api
	github.com/pillar-csi/pillar-csi/backends => ../backends
	github.com/pillar-csi/pillar-csi/configfs => ../configfs
	github.com/pillar-csi/pillar-csi/fencing => ../fencing
)
