module github.com/pillar-csi/pillar-csi/tests

go 1.26.0
