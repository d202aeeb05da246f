# Go native fuzzing: `make fuzz` runs every fuzz target of every module for
# FUZZ_EXECS executions each and stops at the first finding (hack/fuzz.sh).
# It is not part of `make check`: plain `go test` (make test) already runs
# each target's seed corpus and the inputs kept in testdata/fuzz, which is
# the short pass CI keeps.

##@ Develop

# Executions per target; FUZZ_RUN=FuzzRead picks targets by name.
FUZZ_EXECS ?= 1000000
FUZZ_RUN   ?= .
# configfs's FuzzRead builds a directory tree per execution: on tmpfs that
# is several times faster than on disk. Empty to use the default TMPDIR.
FUZZ_TMPDIR ?= $(wildcard /dev/shm)

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZ_EXECS executions (default 1000000) each; stops at the first finding
	FUZZ_EXECS=$(FUZZ_EXECS) FUZZ_RUN='$(FUZZ_RUN)' $(if $(FUZZ_TMPDIR),TMPDIR=$(FUZZ_TMPDIR)) hack/fuzz.sh $(MODULES)
