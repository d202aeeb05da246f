module github.com/pillar-csi/pillar-csi/tests

go 1.26.0

require github.com/pillar-csi/pillar-csi/backends v0.0.0

require golang.org/x/sys v0.50.0 // indirect

replace github.com/pillar-csi/pillar-csi/backends => ../backends
