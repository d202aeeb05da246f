// Package tlsconfig serves pillar-agent's mutual-TLS material from files
// that are rotated while the agent runs.
//
// New loads a server certificate, its key and a client CA bundle, and
// refuses material that cannot work: an unreadable file, a file without
// PEM data, a key that does not match the certificate, an expired
// certificate, a CA file without certificates. Each such error is an
// *Error naming the file.
//
// The *tls.Config from Reloader.ServerConfig requires a client certificate
// and verifies it against the CA bundle (tls.RequireAndVerifyClientCert),
// with TLS 1.2 as the floor; Go negotiates TLS 1.3 whenever the client
// offers it. Session tickets are off, so no connection skips verification
// by resuming an earlier session.
//
// # Rotation
//
// Before every handshake the reloader stats the three files (size, mtime,
// inode) and, only when something changed, reads and parses them. New,
// valid material is used from that handshake on; connections already
// established keep the material they were set up with, as TLS intends.
// Material that fails to load (a rotation caught half-written, a key that
// does not match yet, garbage) never replaces the last good material: the
// failure is logged once and the files are looked at again when they
// change. The kubelet updates a Secret volume by swapping a `..data`
// symlink; os.Stat follows it, so the swap shows up as new inodes. An
// in-place rewrite that leaves size and mtime as they were is caught by a
// full read every DefaultRecheckInterval.
package tlsconfig
