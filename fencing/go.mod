module github.com/pillar-csi/pillar-csi/fencing

go 1.26.0

require (
	github.com/google/renameio/v2 v2.0.2
	golang.org/x/sys v0.50.0
)

require github.com/google/go-cmp v0.7.0
