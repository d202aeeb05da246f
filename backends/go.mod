module github.com/pillar-csi/pillar-csi/backends

go 1.26.0
