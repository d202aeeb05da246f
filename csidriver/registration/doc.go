// Package registration registers pillar-node with kubelet as a CSI plugin,
// the job the node-driver-registrar sidecar does elsewhere: it serves
// kubelet's plugin Registration service
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1) on a unix socket in
// kubelet's plugin registration directory, <dir>/pillar-csi.io-reg.sock.
//
// How kubelet uses the socket (read in k8s.io/kubernetes v1.37,
// pkg/kubelet/pluginmanager and pkg/volume/csi/csi_plugin.go; v1.24, the
// oldest release we support, behaves the same):
//
//   - Discovery. kubelet's plugin watcher (pluginwatcher/plugin_watcher.go)
//     creates the directory at its start, walks it once (so a socket that
//     survived a kubelet restart is found again) and then follows it with
//     fsnotify: a Create event (a bind, or a rename into the directory)
//     adds the socket to its desired state, a Remove event drops it. Files
//     whose names start with "." are ignored, which is why the socket is
//     bound under a dot name, given its mode and only then renamed into
//     place. A directory that is itself removed is not watched again until
//     kubelet restarts.
//   - Registration (operationexecutor/operation_generator.go). The
//     reconciler, once a second, dials every new socket (10 s dial
//     timeout), calls GetInfo with a 1 s deadline, hands type, name,
//     endpoint and versions to the CSI handler, and finally calls
//     NotifyRegistrationStatus (5 s deadline) with registered=true, or with
//     registered=false and the reason when any step failed. A failed
//     registration is retried with exponential backoff for as long as the
//     socket exists. A socket re-created at the same path is a new plugin
//     instance: kubelet deregisters the old one and registers again.
//   - The CSI handler (RegistrationHandler in csi_plugin.go) accepts only
//     versions whose highest is 1.x (node-driver-registrar reports
//     "1.0.0", and so do we), and refuses a second registration under the
//     same name unless its highest version is greater — harmless here,
//     because the same socket path is deregistered first. It stores the
//     endpoint and dials it as a plain unix socket path (no unix://
//     scheme) from kubelet's mount namespace: the endpoint must be the CSI
//     socket as the host sees it, not as this container sees it. Right
//     after registering it calls NodeGetInfo on that endpoint (2 min
//     deadline) and writes the node ID into the CSINode object; when that
//     fails the registration fails. So the CSI socket must already be
//     serving when the registration socket appears.
//   - Deregistration. When the socket disappears kubelet deregisters the
//     driver and removes it from the node's CSINode object; mounts already
//     done stay, but kubelet makes no new CSI calls on the node until a
//     socket appears again. This is why a lost socket is re-created, and
//     why pillar-node removes it first at shutdown: kubelet stops sending
//     calls while the CSI endpoint finishes the ones in flight.
//
// What the Registrar does about it: it removes a stale socket at start
// (only a socket, and only one that nothing answers on), creates its own
// with mode 0600 (kubelet runs as root), checks every CheckInterval that
// the same inode is still at the path and re-creates the socket when it is
// not (a wiped directory or kubelet's directory recreated on a tmpfs), and
// removes the socket on shutdown — never one that another instance put in
// its place. Registered reports kubelet's last NotifyRegistrationStatus
// for the current socket; a re-created socket starts unregistered.
package registration
