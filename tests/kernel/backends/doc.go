// Package backends is the real-kernel suite of the backends module: the
// ZFS and LVM backends against real zpools, volume groups and thin pools on
// loop devices in the kernel lab's guest, with ZFS 2.1 and LVM 2.03.
//
// One conformance scenario runs against four stores (ZFS thick, ZFS
// sparse, LVM linear, LVM thin): bad input refused before any command; the
// store's capacity before and after; create (rounded size reported), an
// idempotent repeat and a conflicting one; the device node, without udev,
// and its size; expansion, an idempotent repeat and a refused shrink; List
// reporting only owned volumes while an unowned volume of the same name is
// never touched; deletion refused while the device is open, then done, then
// repeated; out-of-space; concurrent creates and deletes of different
// volumes; the longest volume ID; a store that does not exist. Store
// specific tests add what only one backend has (a parent dataset created on
// demand, an inactive LV or a lost /dev/mapper node, a thin pool that does
// not zero new chunks: refused, allowed with the opt-out, accepted again
// after lvchange --zero y, and the leak it prevents measured), and
// cancellation: a command blocked on LVM's lock is killed with its process
// group when the context ends.
//
// Run it with
//
//	cd tests && go run ./cmd/pillar-lab test tests/kernel/backends
//
// The benchmark (64 creates and deletes through the backend against the
// same commands in a shell loop, ZFS sparse and LVM thin) runs with
//
//	go run ./cmd/pillar-lab test tests/kernel/backends -- -test.run '^$' -test.bench . -test.benchtime 1x
//
// With -backends.capture the suite also writes every command the backends
// run, with its exit status and output, to the run's out/captures directory
// (pillar-lab -keep keeps it); those files are the testdata the backends
// module's unit tests replay.
package backends
