// Package configfs is a typed client for the Linux NVMe target (nvmet)
// configfs tree, normally mounted at /sys/kernel/config. It replaces
// nvmetcli and targetcli for pillar-csi and is meant to be imported on its
// own by unrelated nvmet tools: it depends only on the standard library and
// golang.org/x/sys.
//
// # Model
//
// An FS is a configfs mount point (NewFS; DefaultRoot is
// /sys/kernel/config). Read returns a State: every subsystem with its
// attributes, namespaces and allowed hosts, every port with its address,
// linked subsystems, referrals and ANA groups, and every host, including
// objects other tools created. Struct fields name the attribute files they
// come from. Attributes an older kernel (or a kernel built without the
// feature) lacks read as zero values. ReadSubsystem and ReadExport read one
// subsystem (ReadExport with the addresses of its ports) without walking
// the others, for callers whose cost must not grow with the export count.
// The reads take nothing on trust, since a tree under another root may be
// a fixture or anything else: they never follow a symlink where a group or
// an attribute belongs, open nothing but directories and regular files,
// and refuse an attribute longer than any configfs attribute (EFBIG).
//
// An Export is the desired state of one subsystem: attributes, exactly
// these namespaces, links to the ports listening on these addresses, and
// either allow_any_host or an access list. Apply makes it true from any
// starting state — absent, partly applied, identical or different — and
// Remove deletes it together with the ports and host entries nothing else
// uses. Both validate every name before touching the filesystem and return
// *Error values carrying the operation, the path and the errno
// (IsNotExist, IsExist, IsBusy and IsInvalid classify them).
//
// After a namespace's device grew, RevalidateSize makes nvmet re-read its
// size and tell the connected initiators; nvmet does not notice by itself.
//
// Ports are shared: every export on the same address (transport, address
// family, address, service ID) is linked to the same port. Addresses are
// compared in canonical form, in which an IPv4-mapped IPv6 address
// (ipv6 "::ffff:192.0.2.10") is the IPv4 address it maps (ipv4
// "192.0.2.10"): the kernel binds both to one listener. A new port's ID
// is PreferredPortID of its address — a hash, so the same address gets the
// same ID on every node, after every reboot and whatever the order of
// Applies — moved to the next free ID only when another port already
// holds it. Existing ports keep their IDs. Of several ports on one address
// (other tools may leave a disabled one next to the enabled one), the
// enabled one is shared: only one can listen.
//
// # Kernel rules
//
// Apply and Remove are written around the following behaviour of Linux 6.1
// (drivers/nvme/target/configfs.c, fs/configfs). Every rule was observed on
// Debian's 6.1.0-57 kernel and is re-proven by the module's real-kernel
// suite (kerneltest, build tag "kernel").
//
// Objects and names:
//   - mkdir of a subsystem, namespace, port or host creates its attribute
//     files and default groups (namespaces/, allowed_hosts/; subsystems/,
//     referrals/, ana_groups/1/) with kernel defaults; rmdir removes them.
//     Default groups cannot be removed (EPERM) and nothing can be made
//     inside allowed_hosts/ or a port's subsystems/ but links (EPERM).
//   - The discovery NQN cannot be created (EINVAL). Subsystem names of any
//     length up to NAME_MAX are accepted, but nvmet answers to the first
//     223 bytes only, and the Linux initiator refuses NQNs of 223 bytes or
//     more (EINVAL from /dev/nvme-fabrics): the longest NQN a Linux host can
//     reach is 222 bytes, which is what ValidateNQN allows. Namespace IDs 0
//     and 0xffffffff and port IDs above 65535 are refused (EINVAL).
//   - Port, namespace and ANA group directory names are parsed with base 0
//     (kstrtou16, kstrtou32): "0x10" is port 16 and "010" namespace 8.
//     Read reports such objects by that ID, Apply converges them in place
//     and new ones are named in decimal.
//   - An empty write is refused before the kernel sees it (EFAULT).
//
// Namespaces:
//   - A new namespace's device_path reads "(null)"; enable without a path
//     fails with EINVAL, with a missing device with ENOENT. A new zvol's
//     device is removed and made again once after it appeared when it
//     was created with a volmode (ZFS 2.1), and an enable in between fails
//     with ENOENT or ENXIO: Apply tries such an enable again for up to
//     2 s. A path that is
//     not a block device is opened as a file, with O_DIRECT unless
//     buffered_io is 1 (so a file on tmpfs needs buffered_io).
//   - device_path, device_uuid and device_nguid cannot be written while the
//     namespace is enabled (EBUSY, even with the current value);
//     buffered_io neither (EINVAL). ana_grpid can. Apply therefore disables
//     a namespace only when one of the former really changes.
//   - A new namespace gets a random device_uuid on current 6.1 stable
//     kernels (all zeros on older ones).
//   - An enabled namespace can be removed: rmdir disables it first.
//
// Subsystems:
//   - attr_serial is at most 20 printable ASCII bytes and reads back padded
//     with spaces to 20; attr_model at most 40; attr_version "2.0.0" reads
//     back as "2.0".
//   - Once an initiator has identified a controller, attr_serial,
//     attr_model and attr_version refuse every write (EINVAL), even of the
//     value they hold. Apply never rewrites an equal value, so re-applying
//     a live export succeeds; changing them needs a new subsystem.
//   - attr_cntlid_min < attr_cntlid_max must hold after every single write
//     (EINVAL), so Apply orders the two writes; values are parsed with
//     sscanf("%hu") and wrap (70000 is stored as 4464), so they are
//     validated here. attr_qid_max is 1 to 128.
//
// Access control:
//   - A host is hosts/<nqn>, referenced by a link in a subsystem's
//     allowed_hosts/. attr_allow_any_host=1 is refused while links exist,
//     and a link is refused while attr_allow_any_host is 1 (EINVAL both
//     ways), so Apply removes links before opening a subsystem up and
//     closes it before linking. A second link to the same host is EEXIST.
//   - The access list is checked when a host connects: unlinking a host or
//     closing the subsystem does not disconnect a controller it already
//     has, and its I/O continues. Refused connects fail with EIO at the
//     initiator.
//
// Links:
//   - A symlink's target is resolved against the calling process's working
//     directory, not the link's directory, so targets must be absolute.
//     readlink returns a path relative to the link, four levels up from any
//     nvmet link directory: "../../../../nvmet/hosts/<nqn>",
//     "../../../../nvmet/subsystems/<nqn>". Read reports links by target,
//     so links other tools named differently are understood, and Apply and
//     Remove find and remove them by target too.
//   - A subsystem is linked at most once per port (a second link, under
//     any name, is EEXIST), so a link named after the subsystem that
//     points at it is the only one on that port.
//   - A link target cannot be removed while linked (rmdir: EBUSY); a group
//     with children — namespaces, links, referrals, ANA groups other than
//     the default group 1 — cannot be removed (ENOTEMPTY). Remove relies on
//     these two answers to tell whether a host or port is still used.
//
// Ports:
//   - Linking the first subsystem enables a port: the transport binds its
//     listener, so the symlink fails with EINVAL when the address is
//     incomplete or malformed, EADDRINUSE when another port listens there
//     and EADDRNOTAVAIL when the machine lacks the address. Apply removes a
//     port it created for a link that failed.
//   - While any subsystem is linked, every addr_* and param_* attribute
//     refuses writes (EACCES, even of the current value); nvmet-tcp sets
//     param_inline_data_size (-1 until then) when the port is enabled.
//   - Unlinking a subsystem tears down its controllers on that port;
//     unlinking the last one disables the port.
//   - nvmet-tcp parses addr_trsvcid with base 0 when the port is enabled
//     (kstrtou16 in inet_pton_with_scope): "06123" listens on 3155 and
//     "09123" fails the link with EINVAL. Validation therefore refuses a
//     service ID with a leading zero.
//   - A tcp port on ipv6 "::ffff:a.b.c.d" and one on ipv4 "a.b.c.d" with
//     the same service ID are one listener: enabling the second fails with
//     EADDRINUSE.
//
// # Concurrency
//
// An FS serializes work per subsystem, per port address and per host
// within the process, so Apply and Remove of different subsystems that
// share a port or a host may run concurrently. It assumes no other process
// writes the same subsystems at the same time (pillar-agent owns every
// configfs write on its node); objects other tools created are read and
// respected, ports and hosts they also use are kept, and a port ID taken by
// another writer between listing and mkdir is skipped (mkdir's EEXIST).
// A single configfs write cannot be interrupted; ctx is checked between
// steps, and none of the writes waits for the network.
//
// # Build
//
// The package builds on every platform; outside Linux the same calls go
// through package os, for tools that only read fixture trees.
package configfs
