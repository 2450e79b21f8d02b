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

.PHONY: test vet fmt-check tidy-check tidy staticcheck release-check bench demo modules idem-check-thirdparty

modules:
	@printf '%s\n' $(MODULES)

test:
	@set -e; for m in $(MODULES); do \
		echo "== go test $(TESTFLAGS) ./... in $$m"; \
		(cd $$m && $(GO) test $(TESTFLAGS) ./...); \
	done

vet:
	@set -e; for m in $(MODULES); do \
		echo "== go vet ./... in $$m"; \
		(cd $$m && $(GO) vet ./...); \
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
staticcheck:
	@if ! "$(STATICCHECK)" -version 2>/dev/null | grep -qF "($(STATICCHECK_VERSION:v%=%))"; then \
		echo "== go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)"; \
		GOWORK=off GOBIN="$(GOBIN_DIR)" $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); \
	fi
	@fail=0; for m in $(MODULES); do \
		echo "== staticcheck ./... in $$m"; \
		out=$$(cd $$m && "$(STATICCHECK)" ./... 2>&1) || fail=1; \
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
