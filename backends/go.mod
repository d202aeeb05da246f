module github.com/pillar-csi/pillar-csi/backends

go 1.26.0

require golang.org/x/sys v0.50.0
