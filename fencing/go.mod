module github.com/pillar-csi/pillar-csi/fencing

go 1.26.0
