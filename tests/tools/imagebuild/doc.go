// Command imagebuild builds pillar-csi's container images without a container
// engine: each image is one layer made from a root filesystem that it
// assembles from a binary of ours and Debian packages at pinned versions.
//
// # Why go-containerregistry
//
// github.com/google/go-containerregistry builds and writes images as plain
// data structures: it needs no daemon, no registry and no privileges; it
// writes both an OCI image layout (layout.Write) and the docker-archive
// tarball that `ctr -n k8s.io images import` loads (tarball.Write); and it
// computes every digest from the bytes we hand it, adding nothing of its own
// (no timestamps, no host names), so a deterministic layer and config give a
// deterministic image. buildah, kaniko or BuildKit would each need a daemon
// or a container runtime this machine does not have.
//
// # Reproducibility
//
// The same definition, binaries, packages and epoch give the same digest:
// the layer's tar entries are sorted by path, owned by 0:0 with no user or
// group names, stamped with the epoch (SOURCE_DATE_EPOCH: the commit time
// for our images, 0 for the third-party ones) and gzip-compressed with a
// header that carries no name and no time; the config's created time and its
// history are the epoch too. Debian packages are unpacked with `dpkg-deb -x`,
// so no maintainer script runs and nothing of the build host leaks in.
// Deflate output is stable for one Go toolchain, which the tools module pins.
//
// # Definitions
//
// An image is a directory deploy/images/<name>/ holding image.yaml:
//
//	image: ghcr.io/pillar-csi/pillar-node  # the tag comes from -tag unless set here
//	entrypoint: [/usr/bin/pillar-node]
//	labels: {org.opencontainers.image.title: pillar-node}
//	files:    [{src: bin/pillar-node, dst: /usr/bin/pillar-node, mode: "0755"}]
//	symlinks: [{path: /bin/sh, target: dash}]
//	packages:
//	  - deb: dash=0.5.12-2           # name=version, bookworm, amd64
//	    why: /bin/sh for the init container
//	    keep: [/bin/dash]            # only these paths; all when empty
//	checks:
//	  - run: [sh, -c, echo ok]       # run in a chroot into the root filesystem
//	    expect: ok
//	absent: [zfs, lvm]               # commands that must not be on PATH
//
// Every shared library an ELF file in the root filesystem needs (its
// interpreter and DT_NEEDED entries, searched like ld.so searches them) must
// be in the image, or the build fails and names what is missing; the chroot
// checks then prove the tools really start.
//
// # Commands
//
//	imagebuild build -def deploy/images/pillar-node -out bin/images [-tag T] [-label k=v]...
//	imagebuild check -def deploy/images/pillar-node -rootfs bin/images/pillar-node.rootfs
//	imagebuild pins [-update] deploy/images/*/image.yaml
//	imagebuild push -images bin/images -registry host[:port]/path [-insecure] [-values FILE] [NAME...]
//
// build downloads missing packages with `apt-get download name=version` into
// the cache (-cache, default /var/cache/pillar-csi/images) and writes
// <name>.tar, <name>.oci/, <name>.rootfs/ and <name>.json (reference,
// digest, size) under -out. pins compares every pin with the candidate
// version `apt-cache policy` reports and, with -update, rewrites the pins.
// push (make push) copies every image of the Helm chart from -images to
// the registry under its tag, reads each back by digest, and writes a
// values file that names each image by repository, tag and digest; it
// refuses plain HTTP unless -insecure says so.
package main
