// Package driver holds what every pillar-csi CSI service reports about the
// driver itself: its name and version. The Node service (pillar-node) and
// the Controller service (pillar-controller) share them.
package driver

// Name is the CSI driver name, GetPluginInfo's name, and the CRD group.
const Name = "pillar-csi.io"

// Version is the driver version GetPluginInfo reports. Release builds set
// it with -ldflags "-X github.com/pillar-csi/pillar-csi/csidriver/driver.Version=v1.2.3".
var Version = "v0.0.0-dev"
