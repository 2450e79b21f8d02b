# idem is several Go modules: the root (client SDK and server core), one module per
# heavy dependency, so that a user of the client never downloads pgx or go-redis, the
# command, e2e, bench and the CI tool. They require each other at the release version
# (v0.1.0); go.work makes them one workspace for development, and every target below
# but tidy-check and release-check runs in it. `make test` runs every module's tests
# with the race detector; .ci/run runs all of the checks.

GO      ?= go
# Every module: each directory with a go.mod (testdata and vendor aside), the root
# first. New modules are picked up without a change here.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' \
	-not -path '*/vendor/*' -printf '%h\n' | sed 's|^\./||' | LC_ALL=C sort)
TESTFLAGS ?= -race -count=1 -timeout 10m
BENCHFLAGS ?=

STATICCHECK_VERSION := v0.8.2
GOBIN_DIR   := $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)
STATICCHECK ?= $(GOBIN_DIR)/staticcheck

# test-module/MODULE (any module's directory) runs that module's tests alone.
.PHONY: test test-serial vet fmt-check tidy-check tidy staticcheck release-check bench demo modules idem-check-thirdparty dist version

modules:
	@printf '%s\n' $(MODULES)

# make test runs the modules' tests at once, TEST_JOBS modules at a time, each one's
# output printed whole when it ends, with its time (GNU make 4's -j and
# --output-sync; an older make runs them one by one); a failing module does not stop
# the others. server/redisstore's tests fail over the Redis Cluster and Sentinel set
# they are given (IDEM_REDIS_CLUSTER_ADDRS, IDEM_REDIS_SENTINEL_ADDRS), which
# cmd/idem-server's and bench's tests use too: those three modules run one after
# another (TEST_SERIAL), unless IDEM_FAILOVER_REDIS_CLUSTER_ADDRS and
# IDEM_FAILOVER_REDIS_SENTINEL_ADDRS name another Cluster and Sentinel set (with the
# same master name), server/redisstore's alone, as .ci/run starts. Modules share
# nothing else: each one's private servers listen on a port range of its own
# (internal/testkit/servicetest), and their PostgreSQL tables and Redis keys have names of
# their own. TEST_LONG, the modules whose tests take longest, start first, longest
# first.
TEST_JOBS   ?= 4
TEST_SERIAL := server/redisstore cmd/idem-server bench
TEST_LONG   := server/redisstore bench . cmd/idem-check e2e cmd/idem-server
TEST_SYNC   := $(if $(filter output-sync,$(.FEATURES)),-j$(TEST_JOBS) --output-sync=target,-j1)
ifneq ($(and $(IDEM_FAILOVER_REDIS_CLUSTER_ADDRS),$(IDEM_FAILOVER_REDIS_SENTINEL_ADDRS)),)
TEST_SERIAL :=
test-module/server/redisstore: export IDEM_REDIS_CLUSTER_ADDRS = $(IDEM_FAILOVER_REDIS_CLUSTER_ADDRS)
test-module/server/redisstore: export IDEM_REDIS_SENTINEL_ADDRS = $(IDEM_FAILOVER_REDIS_SENTINEL_ADDRS)
endif

test:
	@$(MAKE) --no-print-directory --keep-going $(TEST_SYNC) test-serial $(addprefix test-module/,$(filter-out \
		$(TEST_SERIAL),$(foreach m,$(TEST_LONG),$(filter $m,$(MODULES))) $(filter-out $(TEST_LONG),$(MODULES))))

test-serial:
	@fail=0; for m in $(TEST_SERIAL); do $(MAKE) --no-print-directory test-module/$$m || fail=1; done; exit $$fail

test-module/%:
	@echo "== go test $(TESTFLAGS) ./... in $*"; t=$$(date +%s); \
	if (cd $* && $(GO) test $(TESTFLAGS) ./...); then s=ok; else s=FAIL; fi; \
	echo "== $$s in $$(($$(date +%s) - t))s: go test in $*"; [ $$s = ok ]

# -trimpath, as the release check and make dist build: their build cache
# entries are then the same (they do not depend on where the module cache or
# the tree is), so one finds compiled what the other compiled. CI's go vet is
# the release check's, of every module as published (.ci/run).
vet:
	@set -e; for m in $(MODULES); do \
		echo "== go vet ./... in $$m"; \
		(cd $$m && $(GO) vet -trimpath ./...); \
	done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go mod tidy -diff in every module on its own (GOWORK=off), the way it is released:
# our modules come from a proxy built from the working tree (.ci/release-check), as
# v0.1.0 is not published yet; and go.work.sum holds what the workspace needs, no
# more (.ci/worksum). `make tidy` makes them so.
tidy-check:
	.ci/release-check tidy
	.ci/worksum check

tidy:
	.ci/release-check tidy -w
	.ci/worksum write

# Installs staticcheck $(STATICCHECK_VERSION) when it is missing or another version.
# staticcheck compiles the dependencies it reads (go list -export); with -trimpath,
# as vet and the release check, it shares those compiles with them.
staticcheck:
	@if ! "$(STATICCHECK)" -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION:v%=%))"; then \
		echo "== go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)"; \
		GOWORK=off GOBIN="$(GOBIN_DIR)" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi
	@fail=0; for m in $(MODULES); do \
		echo "== staticcheck ./... in $$m"; \
		out=$$(cd $$m && GOFLAGS=-trimpath "$(STATICCHECK)" ./... 2>&1) || fail=1; \
		[ -z "$$out" ] || printf '%s\n' "$$out" | sed "s|^|$$m/|; s|^\./||"; \
	done; exit $$fail

# A stranger's view of a release, from a proxy built from the working tree: every
# module builds and vets with GOWORK=off, go install of the command, go get of the
# libraries, the installed idem-server answers /healthz. See .ci/releasecheck.
release-check:
	.ci/release-check

# The benchmark run of bench/README.md (about three minutes; BENCHFLAGS=-quick for
# the CI-sized one). It writes bench/results.
bench:
	cd bench && $(GO) run ./cmd/bench $(BENCHFLAGS)

demo:
	$(GO) run ./examples/payments

# idem-check's verdicts on Fiber v2's and v3's idempotency middleware and on the npm
# package express-idempotency: reruns every row against each and rewrites the tables
# and the evidence in cmd/idem-check/README.md (make test checks that the committed
# tables match a fresh run; the express one needs node and npm).
idem-check-thirdparty:
	cd cmd/idem-check/thirdparty && $(GO) test -count=1 -run 'TestThirdPartyVerdicts' . -update

# Static binaries of idem-server and idem-check for people without Go, for each
# GOOS/GOARCH of DIST_PLATFORMS, in dist/ (git-ignored): dist/idem-server-linux-amd64,
# dist/idem-check-darwin-arm64 and so on, with dist/SHA256SUMS. CGO_ENABLED=0 makes
# them static; -trimpath leaves the machine's paths out, so one tree and one Go
# version give the same bytes. VERSION is stamped into each command's main.version
# (what -version prints): make dist VERSION=v0.1.0, or else `git describe --tags
# --always --dirty`, or else (a tree without git) "devel"; `make version` prints it.
# .ci/dist-check runs the linux/amd64 binaries.
DIST_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST_COMMANDS  := idem-server idem-check
VERSION         = $(or $(shell git describe --tags --always --dirty 2>/dev/null),devel)
SHA256SUM      ?= $(if $(shell command -v sha256sum),sha256sum,shasum -a 256)

version: export IDEM_DIST_VERSION = $(VERSION)
version:
	@printf '%s\n' "$$IDEM_DIST_VERSION"

# The version reaches the shell through the environment, whatever quotes it holds.
dist: export IDEM_DIST_VERSION = $(VERSION)
dist:
	@set -e; v=$$IDEM_DIST_VERSION; \
	case "$$v" in ""|*[!A-Za-z0-9._+-]*) echo "VERSION=$$v: want letters, digits and . _ + - only" >&2; exit 2;; esac; \
	rm -rf dist; mkdir dist; \
	for p in $(DIST_PLATFORMS); do for c in $(DIST_COMMANDS); do \
		echo "== $$c $$v $$p"; \
		(cd cmd/$$c && CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath \
			-ldflags "-s -w -X main.version=$$v" -o ../../dist/$$c-$${p%/*}-$${p#*/} .); \
	done; done; \
	cd dist && $(SHA256SUM) idem-* > SHA256SUMS && cat SHA256SUMS
