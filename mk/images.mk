# ---------------------------------------------------------------- images ----
#
# Container images built without a container engine (tests/tools/imagebuild):
# each is one layer from a root filesystem of our binary plus Debian
# packages pinned in deploy/images/<name>/image.yaml. Outputs, per image,
# in bin/images/: <name>.tar (docker-archive, for `ctr -n k8s.io images
# import`), <name>.oci/ (OCI layout), <name>.rootfs/ (what the kernel-lab
# tests chroot into) and <name>.json (reference, digest, size).

##@ Images

# Our images are tagged with the version the binaries report, or TAG=.
IMAGE_TAG ?= $(or $(TAG),$(VERSION))
IMAGE_REVISION = $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The mtime of every file and the images' created time: the commit time,
# so that a rebuild of the same commit gives the same digests.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# Downloaded .deb files; kept, so that an image stays buildable after the
# archive drops a pinned version.
IMAGE_CACHE ?= /var/cache/pillar-csi/images
IMAGES_DIR  := $(BIN)/images
IMAGEBUILD  := $(BIN)/imagebuild

OUR_IMAGES     := pillar-controller pillar-agent pillar-node
SIDECAR_IMAGES := csi-provisioner csi-attacher csi-resizer csi-snapshotter snapshot-controller
ALL_IMAGES     := $(OUR_IMAGES) pause $(SIDECAR_IMAGES)
IMAGE_DEFS     := $(foreach i,$(ALL_IMAGES),deploy/images/$i/image.yaml)

# Flags per image. The pause and sidecar images pin their tags in their
# definitions and do not depend on our commit (epoch 0), so they keep their
# digests from one commit to the next.
imageflags = -source-date-epoch 0
$(foreach i,$(OUR_IMAGES),$(eval imageflags.$i = -tag $$(IMAGE_TAG) -source-date-epoch $$(SOURCE_DATE_EPOCH) \
	-label org.opencontainers.image.version=$$(IMAGE_TAG) -label org.opencontainers.image.revision=$$(IMAGE_REVISION)))
imagebuild-build = $(IMAGEBUILD) build -def deploy/images/$(1) -cache $(IMAGE_CACHE) $(or $(imageflags.$(1)),$(imageflags))

$(IMAGEBUILD): $(TOOLS_MOD) $(wildcard $(TOOLS_DIR)/imagebuild/*.go)
	@echo ">> building imagebuild"
	cd $(TOOLS_DIR) && GOWORK=off go build -trimpath -o $@ ./imagebuild
	@touch $@

$(BIN)/pause: $(TOOLS_MOD) $(wildcard $(TOOLS_DIR)/pause/*.go)
	@echo ">> building pause"
	cd $(TOOLS_DIR) && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o $@ ./pause
	@touch $@

# The CSI sidecars, from the Go module proxy at the versions their modules
# pin: one module each under tests/tools/sidecars/, because their build
# lists conflict (see tests/tools/sidecars/README.md). Stamped like
# upstream's release-tools (-X main.version), static like upstream's images.
SIDECARS_DIR := $(TOOLS_DIR)/sidecars
sidecar.csi-provisioner := provisioner github.com/kubernetes-csi/external-provisioner/v6
sidecar.csi-attacher    := attacher github.com/kubernetes-csi/external-attacher/v4
sidecar.csi-resizer     := resizer github.com/kubernetes-csi/external-resizer/v2
sidecar.csi-snapshotter := snapshotter github.com/kubernetes-csi/external-snapshotter/v8
# Not a sidecar but the cluster's snapshot controller, from the same module:
# the lab cluster runs it (the chart can, behind a value).
sidecar.snapshot-controller := snapshotter github.com/kubernetes-csi/external-snapshotter/v8
sidecar-version = $(call mod-version,$(SIDECARS_DIR)/$(1)/go.mod,$(2))
SIDECAR_BINS := $(addprefix $(BIN)/sidecars/,$(SIDECAR_IMAGES))

define sidecar-rule
$(BIN)/sidecars/$(1): $(SIDECARS_DIR)/$(word 1,$(sidecar.$(1)))/go.mod $(SIDECARS_DIR)/$(word 1,$(sidecar.$(1)))/go.sum
	@echo ">> building $(1) $$(call sidecar-version,$(word 1,$(sidecar.$(1))),$(word 2,$(sidecar.$(1))))"
	$(TOOLCACHE) $$@ $$^ -- env -C $(SIDECARS_DIR)/$(word 1,$(sidecar.$(1))) GOWORK=off CGO_ENABLED=0 go build -trimpath \
		-ldflags '-s -w -X main.version=$$(call sidecar-version,$(word 1,$(sidecar.$(1))),$(word 2,$(sidecar.$(1))))' \
		-o $$@ $(word 2,$(sidecar.$(1)))/cmd/$(1)
endef
$(foreach s,$(SIDECAR_IMAGES),$(eval $(call sidecar-rule,$s)))

.PHONY: sidecars
sidecars: $(SIDECAR_BINS) ## Build the CSI sidecars (provisioner, attacher, resizer, snapshotter) and the snapshot controller from the Go module proxy into bin/sidecars/

# Images hold static binaries: CGO_ENABLED=0 for the binaries built here,
# whatever the environment says (a cgo build needs the host's libc).
.PHONY: images-binaries
images-binaries: export CGO_ENABLED := 0
images-binaries:
	$(foreach b,$(ALL_BINARIES),$(call build-binary,$b))

.PHONY: images
images: images-binaries $(IMAGEBUILD) $(BIN)/pause $(SIDECAR_BINS) ## Build every container image (ours, pause, CSI sidecars) into bin/images/ and print reference, digest and size
	@$(foreach i,$(ALL_IMAGES),$(call imagebuild-build,$i) -out $(IMAGES_DIR) &&) true

# The proof that the images work and are reproducible: the builder's own
# tests (a fixture image built twice gives one digest; the loader check
# finds a missing library), the chroot checks of every image (each tool and
# binary starts and reports its version, no zfs or lvm in the agent), and
# every image built a second time, which must give the digests of the
# first.
# make push REGISTRY=registry.example:5000/pillar-csi [TAG=1.2.3] [INSECURE=1]
# pushes every image of the chart (ours and the sidecars) under its tag,
# reads each back by digest, and writes PUSH_VALUES: the chart's values
# that name each image by repository, tag and digest. Credentials come from
# the Docker config (~/.docker/config.json), as for docker and crane.
PUSH_VALUES ?= $(BIN)/push-values.yaml
ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY),)
$(error make push needs REGISTRY=host[:port]/path, e.g. REGISTRY=registry.example:5000/pillar-csi)
endif
endif
.PHONY: push
push: images $(IMAGEBUILD) ## Push the chart's images to REGISTRY=host[:port]/path by digest and write bin/push-values.yaml for helm install -f (TAG=, INSECURE=1 for plain HTTP)
	$(IMAGEBUILD) push -images $(IMAGES_DIR) -registry $(REGISTRY) $(if $(INSECURE),-insecure) -values $(PUSH_VALUES)

.PHONY: images-check
images-check: images $(BIN)/helm ## Prove the images: chroot into each root filesystem and run every tool, rebuild each image and compare digests (needs root)
	cd $(TOOLS_DIR) && GOWORK=off go test -count=1 ./imagebuild/ ./pause/
	@$(foreach i,$(ALL_IMAGES),$(IMAGEBUILD) check -def deploy/images/$i -rootfs $(IMAGES_DIR)/$i.rootfs &&) true
	@rm -rf $(IMAGES_DIR)/.rebuild
	@echo ">> rebuilding every image to compare digests"
	@$(foreach i,$(ALL_IMAGES),$(call imagebuild-build,$i) -out $(IMAGES_DIR)/.rebuild >/dev/null &&) true
	@failed=; for i in $(ALL_IMAGES); do \
		a=$$(sed -n 's/.*"digest": "\(.*\)".*/\1/p' $(IMAGES_DIR)/$$i.json); \
		b=$$(sed -n 's/.*"digest": "\(.*\)".*/\1/p' $(IMAGES_DIR)/.rebuild/$$i.json); \
		if [ -n "$$a" ] && [ "$$a" = "$$b" ]; then echo "  reproducible  $$i  $$a"; \
		else echo "  NOT REPRODUCIBLE  $$i: $$a, then $$b" >&2; failed="$$failed $$i"; fi; \
	done; rm -rf $(IMAGES_DIR)/.rebuild; \
	if [ -n "$$failed" ]; then echo "images-check: digests differ for:$$failed" >&2; exit 1; fi

# Stale pins fail the build with a message naming the package; this shows
# every pin against the archive's current version and rewrites the stale
# ones. Review the diff, run make images-check, commit.
.PHONY: images-update-pins
images-update-pins: $(IMAGEBUILD) ## Rewrite stale Debian package pins in deploy/images/*/image.yaml to the archive's current versions
	$(IMAGEBUILD) pins -update $(wildcard deploy/images/*/image.yaml)

.PHONY: images-pins
images-pins: $(IMAGEBUILD) ## List every Debian package pin with the archive's current version; fails if one is stale
	$(IMAGEBUILD) pins $(wildcard deploy/images/*/image.yaml)

