module github.com/pillar-csi/pillar-csi/fencing

go 1.26.0

require (
	github.com/google/renameio/v2 v2.0.2
	golang.org/x/sys v0.50.0
)

require (
	github.com/google/go-cmp v0.7.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)
