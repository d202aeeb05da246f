// Package kerneltest is the configfs module's real-kernel suite. Its tests
// and benchmarks carry the build tag "kernel" and run as root inside the
// pillar-csi kernel lab (a Debian 6.1 kernel under QEMU with nvmet,
// nvmet-tcp and nvme-tcp loaded; see tests/README.md in the repository):
//
//	make test-kernel                                      # every kernel suite
//	cd tests && go run ./cmd/pillar-lab test configfs     # this one
//	cd tests && go run ./cmd/pillar-lab test configfs -- -test.run '^$' -test.bench .
//
// Every test fails, never skips, outside the lab: the guest kernel carries
// pillar.lab=1 on its command line, and nothing else does.
//
// The suite exports loop devices over NVMe/TCP on 127.0.0.1 and connects the
// kernel's own initiator to them, as blktests does: target and initiator in
// one kernel over loopback TCP.
package kerneltest
