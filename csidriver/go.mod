module github.com/pillar-csi/pillar-csi/csidriver

go 1.26.0
