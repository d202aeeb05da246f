module github.com/pillar-csi/pillar-csi/configfs

go 1.26.0
