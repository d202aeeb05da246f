module github.com/pillar-csi/pillar-csi/agent

go 1.26.0
