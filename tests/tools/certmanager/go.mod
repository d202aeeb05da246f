module github.com/pillar-csi/pillar-csi/tests/tools/certmanager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
