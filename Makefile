GO ?= go
PURE := ./budget/... ./compaction/... ./frames/...

.PHONY: test vet check-deps bench bench-go test-peers fmt run build example example-longtask inspect

## run: start the StateIndex server on ./data/stateindex.db (Ctrl-C stops it cleanly)
run:
	$(GO) run ./cmd/stateindex serve --data ./data

## build: the stateindex binary in ./bin
build:
	$(GO) build -o bin/stateindex ./cmd/stateindex

## example: the agent example (run it twice; kill it midway; then --approve)
example:
	$(GO) run ./examples/agent --data ./data/agent-example

## example-longtask: a long task that continues twice (explicitly, then automatically), finishes and is resumed by a user
example-longtask:
	$(GO) run ./examples/longtask

## inspect: print the example's frame trees
inspect:
	$(GO) run ./cmd/stateindex inspect --data ./data/agent-example

## test: vet, check the pure core's imports, then every test with the race detector,
## then the cluster tests of AwaitFrame, hooks and ListFrames' fan-out without it (a cluster node races
## inside Proto.Actor under -race; about 20 s: two `stateindex serve` members each)
test: vet check-deps
	$(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run '^TestCluster(AwaitFrameAndRemoteHook|HookToAKind)$$' ./internal/clustertest
	$(GO) test -count=1 -run '^(TestClusterListFramesFansOutAndMerges|TestClusterOutboxDeliversAcrossMembers)$$' ./actors

vet:
	$(GO) vet ./...

## check-deps: fail if a pure package depends on bbolt, protoactor, msgpack (or a
## msgpack code generator's runtime), the wire package and its hand-written codec, the
## BPE tokenizer (its ranks stay out of the core) or OpenTelemetry
check-deps:
	@bad=$$($(GO) list -deps $(PURE) | grep -E 'go.etcd.io/bbolt|protoactor|msgpack|tinylib/msgp|actors/wire|tiktoken|stateindex/tokenizer|go.opentelemetry.io' || true); \
	if [ -n "$$bad" ]; then echo "pure core depends on: $$bad" >&2; exit 1; fi; \
	echo "check-deps: budget, compaction and frames import none of bbolt, protoactor, msgpack, msgp, actors/wire, the tokenizer, OpenTelemetry"

## bench: `stateindex bench` (durable, assemble, resume, storage, remote) then the peers
## (state.json, SQLite, StateIndex) side by side in one table; durable: it fsyncs.
## JSON of the run in bench/peers/out/. STATEJSON_MAX caps state.json's checkpoints
## per thread (its time is quadratic in it); BENCH_FLAGS go to `stateindex bench`.
BENCH_OUT := $(CURDIR)/bench/peers/out
STATEJSON_MAX ?= 2500
BENCH_FLAGS ?=
bench:
	@mkdir -p $(BENCH_OUT); start=$$(date +%s); \
	echo "make bench: stateindex bench $(BENCH_FLAGS) --json, then the peers: 10,000 durable 1 KiB checkpoints at 1, 16 and 64 threads on SQLite and StateIndex journal and journal=off in alternating rounds (state.json: at most $(STATEJSON_MAX) per thread)" >&2; \
	$(GO) run ./cmd/stateindex bench --json $(BENCH_FLAGS) > $(BENCH_OUT)/stateindex.json && \
	(cd bench/peers && $(GO) run -mod=mod . --ours $(BENCH_OUT)/stateindex.json --statejson-max-per-thread $(STATEJSON_MAX) --json-out $(BENCH_OUT)/peers.json) && \
	echo "make bench: took $$(( $$(date +%s) - start )) s; JSON in $(BENCH_OUT)"

## bench-go: the go test benchmarks of every package (durable ones fsync)
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## test-peers: vet and test the peers module (bench/peers: SQLite, state.json)
test-peers:
	cd bench/peers && $(GO) vet ./... && $(GO) test -count=1 ./...

fmt:
	gofmt -l -w .

## proto: regenerate actors/wire/wire.pb.go (needs protoc and protoc-gen-go v1.33.0; CI does not)
proto:
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc --go_out=. --go_opt=paths=source_relative actors/wire/wire.proto

## cluster-test: three member processes on 127.0.0.1, one SIGKILLed and restarted mid-run; and the remote example
cluster-test:
	STATEINDEX_CLUSTER_TEST=1 $(GO) test -count=1 -timeout 5m -v -run . ./internal/clustertest
.PHONY: proto cluster-test

.PHONY: crash fuzz

CRASH_CYCLES ?= 200
FUZZTIME ?= 60s

## crash: SIGKILL a write storm CRASH_CYCLES (200) times; after each kill every acknowledged
## write must be in the log, nothing partial, every chain and signature verifying (make test runs 10)
crash:
	$(GO) test -count=1 -timeout 90m -run '^TestCrash$$' ./internal/crashtest -crash.cycles=$(CRASH_CYCLES) -v

FUZZ_TARGETS := eventstore:FuzzRecordEnvelope eventstore:FuzzStoredValues eventstore:FuzzDecodeDomain \
	frames:FuzzApply actors:FuzzSuspensionToken actors:FuzzReservationToken actors:FuzzWireRequest

## fuzz: run every fuzz target for FUZZTIME (60s) each; a crasher lands in PKG/testdata/fuzz/TARGET and fails it.
## Go 1.26's fuzz coordinator can end a clean run with "context deadline exceeded" right at -fuzztime
## (golang/go#75804, fixed in Go 1.27): such an exit with no crasher written is reported and not counted.
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; dir=$$pkg/testdata/fuzz/$$name; out=$$(mktemp); \
		before=$$(ls $$dir 2>/dev/null | wc -l); \
		echo "== $$name (./$$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg >$$out 2>&1; rc=$$?; \
		grep -v '^fuzz: elapsed' $$out; grep '^fuzz: elapsed' $$out | tail -1; \
		after=$$(ls $$dir 2>/dev/null | wc -l); \
		if [ $$rc -ne 0 ]; then \
			if [ $$after -eq $$before ] && grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input' $$out; then \
				echo "== $$name: clean (no crasher; the toolchain's end-of-fuzztime race, golang/go#75804)"; \
			else rm -f $$out; echo "== $$name: FAILED"; exit 1; fi; \
		fi; \
		rm -f $$out; \
	done
