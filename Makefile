# idem is several Go modules: the root (client SDK and server core) and one module per
# heavy dependency, so that a user of the client never downloads pgx or go-redis.
# `make test` runs every module's tests with the race detector.

GO      ?= go
# Modules in dependency order; a directory is listed only if it has a go.mod.
MODULES := $(patsubst %/go.mod,%,$(wildcard go.mod */go.mod */*/go.mod))
MODULES := $(patsubst go.mod,.,$(MODULES))
TESTFLAGS ?= -race -count=1 -timeout 10m

.PHONY: test vet fmt-check tidy-check bench demo

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
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

demo:
	$(GO) run ./examples/payments
