module github.com/pillar-csi/pillar-csi/api

go 1.26.0
