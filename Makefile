# Build, test and check selftaint.
#
# `make test` is what CI runs (.ci/run): it installs etcd if it can, builds the
# Kubernetes control-plane binaries the integration tests start (once, cached
# under bin/), then runs gofmt, go vet and every test.

GO ?= go
BIN := $(CURDIR)/bin
KUBE_VERSION := v1.35.4

# The control-plane binaries that agent/testcp starts, and kubectl, which
# the kubectl plugin's test runs the binary under, built from the pinned
# k8s.io/kubernetes module in hack/kube (a separate module, so the agent does
# not depend on k8s.io/kubernetes).
KUBE_COMPONENTS := kube-apiserver kube-controller-manager kube-scheduler kubectl
KUBE_BINARIES := $(addprefix $(BIN)/,$(KUBE_COMPONENTS))
KUBE_VERSION_PARTS := $(subst ., ,$(patsubst v%,%,$(KUBE_VERSION)))
KUBE_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 1,$(KUBE_VERSION_PARTS)) \
	-X k8s.io/component-base/version.gitMinor=$(word 2,$(KUBE_VERSION_PARTS))

.PHONY: all deps tools libsystemd etcd kube-binaries build vet fmt-check test check demo demo-intro drill-storm rss npd cpu drain-bench latency-bench psi-bench versus-npd clean

all: build

deps: etcd kube-binaries tools libsystemd

# ip (iproute2) for the network probe's tests, which build network
# namespaces and veth pairs; promtool (Debian's prometheus package) for the
# alert rules' tests in deploy/monitoring; systemd-journal-remote for the
# journald log monitor's tests, which write their journals with it.
tools:
	@if [ ! -x /lib/systemd/systemd-journal-remote ] && [ ! -x /usr/lib/systemd/systemd-journal-remote ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "systemd-journal-remote not found; installing it with apt-get..."; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y systemd-journal-remote; \
		else \
			echo "warning: systemd-journal-remote not found; the journald log monitor tests will skip (they fail under CI=true)" >&2; \
		fi; \
	fi
	@if ! command -v ip >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "ip not found; installing iproute2 with apt-get..."; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y iproute2; \
		else \
			echo "warning: ip (iproute2) not found; the network namespace tests will skip (they fail under CI=true)" >&2; \
		fi; \
	fi
	@if ! command -v promtool >/dev/null 2>&1 && [ -z "$$PROMTOOL" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "promtool not found; installing prometheus with apt-get..."; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus; \
		else \
			echo "warning: promtool not found; the alert rule tests will skip (they fail under CI=true)" >&2; \
		fi; \
	fi

# libsystemd's headers (libsystemd-dev) to build: the journald log monitor
# reads the journal with go-systemd's sdjournal, whose cgo code includes
# <systemd/sd-journal.h> and loads libsystemd.so.0 (libsystemd0) with dlopen
# at run time; the binary does not link against it.
libsystemd:
	@if [ ! -f /usr/include/systemd/sd-journal.h ] || ! ldconfig -p 2>/dev/null | grep -q 'libsystemd\.so\.0 '; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "libsystemd headers or library not found; installing libsystemd-dev and libsystemd0 with apt-get..."; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y libsystemd-dev libsystemd0; \
		else \
			echo "error: building needs <systemd/sd-journal.h> and libsystemd.so.0 (the journald log monitor)." >&2; \
			echo "install them with:  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y libsystemd-dev libsystemd0" >&2; \
			exit 1; \
		fi; \
	fi

kube-binaries: $(KUBE_BINARIES)

# Rebuilt only when the pinned module changes. Written to a temporary name
# first so an interrupted build never leaves a binary that looks up to date.
$(KUBE_BINARIES): $(BIN)/%: hack/kube/go.mod hack/kube/go.sum
	@mkdir -p $(BIN)
	@echo "building $* $(KUBE_VERSION) into bin/ (first run only, a few minutes)..."
	cd hack/kube && $(GO) build -trimpath -ldflags "$(KUBE_LDFLAGS)" -o $@.tmp k8s.io/kubernetes/cmd/$*
	@mv -f $@.tmp $@

# etcd comes from the distribution (Debian/Ubuntu package etcd-server);
# agent/testcp also honours $ETCD_BIN.
etcd:
	@if [ -n "$$ETCD_BIN" ] && [ -x "$$ETCD_BIN" ]; then \
		echo "using etcd $$ETCD_BIN"; \
	elif command -v etcd >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "etcd not found; installing etcd-server with apt-get..."; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server; \
	else \
		echo "error: etcd not found on PATH (the integration tests need it)." >&2; \
		echo "install it with:  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server" >&2; \
		echo "or set ETCD_BIN to an etcd binary." >&2; \
		exit 1; \
	fi

# The version and revision `selftaint version` and selftaint_build_info
# report. Without git (or outside a checkout) they stay empty and the binary
# falls back to what the Go toolchain recorded, else "devel"/"unknown".
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)

# How the selftaint binary is linked (the Dockerfile uses the same flags).
# go-nvml's cgo flags make the Go tool link externally, with GNU ld, which
# puts each PT_LOAD segment at an address 2 MiB-congruent with its file
# offset (base 0x400000). On Linux >= 6.18 a page fault maps the whole large
# folio of the page cache it hits, up to 2 MiB, when the folio fits in one
# page table, and a binary that was copied, pulled or written by ld is
# cached in folios of up to 2 MiB: the agent's scattered first touches then
# mapped almost the whole 50 MiB file (Rss 55 MiB, 48 of it file-backed).
# -Ttext-segment=0x401000 moves the image by one page, so no 2 MiB folio
# fits a page table and faults map only what they touch plus the usual
# 64 KiB fault-around (Rss 39 MiB; with only the pages it touches mapped it
# would be 23 MiB: the rest is fault-around, which no link flag changes).
# Measure with `make rss` (hack/rss.sh).
SELFTAINT_LDFLAGS := -s -w -extldflags=-Wl,-Ttext-segment=0x401000
LDFLAGS := $(SELFTAINT_LDFLAGS) -X main.version=$(VERSION) -X main.revision=$(REVISION)

build: libsystemd
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/selftaint ./cmd/selftaint

# Steady-state Rss of `selftaint agent` on a local etcd and kube-apiserver,
# per build variant (default: these flags, and without -Ttext-segment), with
# the resident part of each ELF section. RSS_FLAGS="-c small -t 120",
# RSS_VARIANTS="make unshifted internal pie", RSS_FLAGS="-m default,kernel-log@65532:65532"
# (modes: config and user, side by side); see bash hack/rss.sh -h.
rss: etcd kube-binaries
	RSS_LDFLAGS="$(SELFTAINT_LDFLAGS)" bash hack/rss.sh $(RSS_FLAGS)

# node-problem-detector, which `make cpu` measures selftaint against, built
# from the Go module proxy's copy of the release (module zips leave vendor/
# out, so its dependencies are resolved by its go.mod and checked against
# its go.sum). The checksum database does not answer for the module itself
# everywhere (NPD_GONOSUMDB= to ask it).
NPD_VERSION := v0.8.20
NPD_GONOSUMDB ?= k8s.io/node-problem-detector
npd: $(BIN)/node-problem-detector

$(BIN)/node-problem-detector:
	@mkdir -p $(BIN)
	@echo "building node-problem-detector $(NPD_VERSION) into bin/ (first run only, a few minutes)..."
	@dir=$$(GOFLAGS= GONOSUMDB=$(NPD_GONOSUMDB) $(GO) mod download -json k8s.io/node-problem-detector@$(NPD_VERSION) | \
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	if [ -z "$$dir" ]; then echo "go mod download k8s.io/node-problem-detector@$(NPD_VERSION) failed" >&2; exit 1; fi; \
	src=$$(mktemp -d); cp -R "$$dir"/. "$$src"; chmod -R u+w "$$src"; rm -rf "$$src/vendor"; \
	(cd "$$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 $(GO) build -trimpath \
		-ldflags "-s -w -X k8s.io/node-problem-detector/pkg/version.version=$(NPD_VERSION)" \
		-o $@.tmp ./cmd/nodeproblemdetector); rc=$$?; rm -rf "$$src"; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; mv -f $@.tmp $@

# Steady-state CPU of `selftaint agent` against node-problem-detector's, side
# by side on one local etcd and kube-apiserver, running the same NPD custom
# plugin file (BenchmarkAgentCPUAgainstNPD in cmd/selftaint; a benchmark, so
# never part of `make test`). CPU_WINDOW=2m shortens the 10-minute window.
cpu: etcd kube-binaries npd
	NPD_BIN=$(BIN)/node-problem-detector KUBE_BIN_DIR=$(BIN) CGO_ENABLED=1 \
		$(GO) test -run '^$$' -bench AgentCPUAgainstNPD -benchtime 1x -timeout 40m ./cmd/selftaint/

# A node of 110 pods drained by selftaint's drainer and by kubectl drain
# (k8s.io/kubectl's drain package), side by side on one control plane: time
# to drained and API requests, each, and their ratios.
drain-bench: etcd kube-binaries
	KUBE_BIN_DIR=$(BIN) CGO_ENABLED=1 \
		$(GO) test -run '^$$' -bench DrainAgainstKubectl -benchtime 1x -timeout 20m ./agent/drain/

# End-to-end latency from a kernel or driver event to the taint on a Node
# watch, on one control plane: a kmsg line (NPD's kernel-monitor.json), a
# fatal Xid from the NVML mock, a link down in a network namespace; woken
# by the event, against the same agent polled on its interval and NPD's
# kernel monitor on the same lines (BenchmarkLatency* in agent/; never part
# of `make test`). The netns rows need root and iproute2, NPD's root and
# unshare(1). LATENCY_EVENTS (default 100) and LATENCY_POLLED_EVENTS
# (default 20, also NPD's) set the counts; about 25 minutes on 2 cores.
latency-bench: etcd kube-binaries npd libsystemd tools
	NPD_BIN=$(BIN)/node-problem-detector KUBE_BIN_DIR=$(BIN) CGO_ENABLED=1 \
		$(GO) test -run '^$$' -bench 'Latency(Kmsg|Xid|Netns)$$' -benchtime 1x -timeout 60m ./agent/

# Memory pressure to the memory condition on a Node watch: page-cache
# thrashing in a 64 MiB memory cgroup, the memory probe's PSI stall rule
# (decided on the kernel's trigger) against the avg10 rule, for: 0s, on one
# control plane (BenchmarkPSIPressureToCondition in agent/; never part of
# `make test`). Needs root, PSI and a memory cgroup. PSI_EPISODES (default
# 20) and PSI_AVG_EPISODES (default 5) set the counts; about 4 minutes.
psi-bench: etcd kube-binaries
	KUBE_BIN_DIR=$(BIN) CGO_ENABLED=1 \
		$(GO) test -v -run '^$$' -bench PSIPressureToCondition -benchtime 1x -timeout 30m ./agent/

# Issue 29's side-by-side run (BenchmarkVersusNPD in cmd/selftaint; never
# part of `make test`): node-problem-detector and `selftaint agent` on one
# etcd and kube-apiserver, each on its own Node, the same kernel log lines
# written to each one's FIFO (NPD's bind-mounted over /dev/kmsg in a mount
# namespace of its own): the kernel-monitor.json pair (selftaint's probes
# off), deploy/kernel-log's config against NPD with its two files, and
# selftaint's defaults; as root and as uid 65532. Quiet CPU and context
# switches per process and their ratios, RSS at 20 minutes, Event latency
# per kind with the reasons each side records, lines missed and Events
# recorded twice. Needs root, unshare and setpriv (util-linux).
# -v: a benchmark's log is cut to 10 lines without it. VERSUS_WINDOW (10m) is the quiet window, VERSUS_RSS_AT (20m) when RSS is
# read, VERSUS_EVENTS (21) the lines of each kind; about 25 minutes.
# SELFTAINT_BIN measures a prebuilt binary instead of this tree's. Then
# it runs `make psi-bench` (memory pressure -> condition; VERSUS_PSI=0
# leaves it out).
versus-npd: etcd kube-binaries npd libsystemd
	NPD_BIN=$(BIN)/node-problem-detector KUBE_BIN_DIR=$(BIN) CGO_ENABLED=1 \
		$(GO) test -v -run '^$$' -bench '^BenchmarkVersusNPD$$' -benchtime 1x -timeout 60m ./cmd/selftaint/
	@if [ "$(VERSUS_PSI)" != 0 ]; then $(MAKE) psi-bench; fi

vet: libsystemd
	CGO_ENABLED=1 $(GO) vet ./...

fmt-check:
	@files=$$(find . \( -path ./bin -o -path ./.git \) -prune -o -name '*.go' -print | xargs "$$($(GO) env GOROOT)/bin/gofmt" -l); \
	if [ -n "$$files" ]; then \
		echo "these files need gofmt:" >&2; echo "$$files" >&2; exit 1; \
	fi

# The fleet storms (hundreds of virtual nodes, coordinators killed) and the
# drain e2e tests (virtual nodes drained by the coordinator and `selftaint
# drain`, under the real controllers and scheduler) are the heaviest tests
# and mostly wait on the API server: they run as a second `go test` beside
# the rest, so the suite takes about as long as the longer of the two rather
# than their sum. Their output follows the rest's.
FLEET_E2E = ^(TestNoCoordinator|TestStorm.*|TestHolderGoneFreesGrant|TestStalledAgentGrantedAgain|TestRandomStorms|TestDrainE2E)$$
# -parallel 4: the integration tests mostly wait on the API server and on
# damping windows, so four at a time on two cores keeps both busy (agent
# 422 s one at a time -> about 90 s, deploy 79 -> 27 s).
GO_TEST = CGO_ENABLED=1 KUBE_BIN_DIR=$(BIN) $(GO) test -count=1 -timeout 20m -parallel 4

test: deps fmt-check vet
	@mkdir -p $(BIN); \
	$(GO_TEST) -run '$(FLEET_E2E)' ./cmd/selftaint/ > $(BIN)/fleet-e2e.log 2>&1 & fleet=$$!; \
	rc=0; $(GO_TEST) -skip '$(FLEET_E2E)' ./... || rc=$$?; \
	wait $$fleet || rc=1; \
	echo "--- fleet storms (go test -run '$(FLEET_E2E)' ./cmd/selftaint/):"; cat $(BIN)/fleet-e2e.log; \
	exit $$rc

check:
	$(GO) run ./cmd/selftaint check

# The demo is a drill (deploy/drills/demo.yaml) on a local control plane:
# NoExecute faults under a fleet budget of one node, evictions judged
# against what `selftaint explain` predicted, then sick-node and operator
# drains through one maintenance slot; shown live, judged in a closing
# table, then everything is cleaned up. DEMO_FLAGS go to `selftaint drill`
# (e.g. --report demo.json, --junit demo.xml).
demo: demo-intro deps build
	@$(BIN)/selftaint drill --selftaint $(BIN)/selftaint $(DEMO_FLAGS) deploy/drills/demo.yaml

# A drill at fleet scale (not part of `make test`): 200 virtual nodes in
# three zones, a memory storm on half of them under a NoExecute budget of
# 10, the coordinator's leader killed and then paused mid-storm, three
# nodes NotReady (cmd/selftaint/testdata/drills/fleet-storm.yaml). Prints
# the wall time and (GNU time, where installed) the peak RSS of the largest
# process it ran: the drill or a control-plane component, mostly the
# kube-apiserver; DRILL_STORM_FLAGS go to `selftaint drill` (e.g. --report
# storm.json).
DRILL_STORM := cmd/selftaint/testdata/drills/fleet-storm.yaml
drill-storm: deps build
	@if [ -x /usr/bin/time ]; then \
		/usr/bin/time -f "drill-storm: wall %e s, peak RSS %M KiB (the largest of the drill and its control plane)" \
			$(BIN)/selftaint drill --selftaint $(BIN)/selftaint $(DRILL_STORM_FLAGS) $(DRILL_STORM); \
	else \
		$(BIN)/selftaint drill --selftaint $(BIN)/selftaint $(DRILL_STORM_FLAGS) $(DRILL_STORM); \
	fi

demo-intro:
	@if [ ! -x $(BIN)/kube-apiserver ] || [ ! -x $(BIN)/kube-controller-manager ] || [ ! -x $(BIN)/kube-scheduler ] || [ ! -x $(BIN)/kubectl ]; then \
		echo "make demo: first run: building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl $(KUBE_VERSION) from source into bin/"; \
		echo "           (about 13 minutes on an idle 2-core machine: some 26 CPU-minutes of compiling, CPU-bound, so longer on a busy or smaller one;"; \
		echo "           etcd from apt-get if missing); later runs start in seconds."; \
	fi

clean:
	rm -rf $(BIN)
