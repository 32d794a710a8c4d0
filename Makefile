# The everyday commands. `make test` is the README's test command and what
# .ci/run runs (after `make lint`); the others are for a developer's machine.
GOLANGCI_LINT_VERSION := v2.15.0
GOBIN := $(shell go env GOPATH)/bin
GOLANGCI_LINT := $(GOBIN)/golangci-lint
FUZZTIME ?= 30s

.PHONY: test test-loaded test-modes compat lint fuzz bench demo tools

test:
	go test -race -count=1 -timeout 30m ./...

# The store and the reconciler in pgx's pooler-safe query modes (exec,
# simple_protocol): a statement whose parameters need the server's
# description of it (a struct or []byte into jsonb) fails here, not behind
# a user's PgBouncer. storetest sets the mode on every test database.
test-modes:
	BILLSYNC_TEST_QUERY_MODE=exec go test -race -count=1 -timeout 30m ./store/... ./reconcile/... ./mocks/e2e/...
	BILLSYNC_TEST_QUERY_MODE=simple_protocol go test -race -count=1 -timeout 30m ./store/... ./reconcile/... ./mocks/e2e/...

# The suite three times in a row while stress-ng (Debian's stress-ng) keeps
# both cores busy: a test that holds only on a quiet machine fails here.
test-loaded:
	@command -v stress-ng >/dev/null || { echo 'make test-loaded needs stress-ng (apt-get install stress-ng)'; exit 1; }
	@stress-ng --cpu 2 --timeout 3h --quiet & pid=$$!; trap "kill $$pid" EXIT; \
	for i in 1 2 3; do \
		start=$$(date +%s); \
		go test -race -count=1 -timeout 30m ./... || exit 1; \
		echo "loaded run $$i passed in $$(( $$(date +%s) - start )) s"; \
	done

# The store, reconcile and end-to-end tests on every supported PostgreSQL
# major (14-18), installing missing server binaries from npm; see .ci/compat
# and docs/database.md. COMPAT_MAJORS picks some, e.g. COMPAT_MAJORS="14 18".
compat:
	.ci/compat $(COMPAT_MAJORS)

# gofmt, go vet, staticcheck, errcheck and the import rules (depguard) of
# .golangci.yaml.
lint: tools
	$(GOLANGCI_LINT) run ./...

tools:
	@if ! $(GOLANGCI_LINT) version 2>/dev/null | grep -q "version $(GOLANGCI_LINT_VERSION:v%=%) "; then \
		echo "installing golangci-lint $(GOLANGCI_LINT_VERSION)"; \
		go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi

# Every fuzz target for FUZZTIME each (go test -fuzz takes one target a run).
# The seed corpora run as plain tests in `make test`; new finds land in each
# package's testdata/fuzz and become seeds.
fuzz:
	@set -e; for pkg in $$(go list ./...); do \
		for f in $$(go test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f"; \
			go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# Throughput against baselines measured in the same run; see BENCHMARKS.md.
bench:
	go run ./cmd/billsync bench

demo:
	go run ./cmd/billsync demo
