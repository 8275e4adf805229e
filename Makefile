GO ?= go
PURE := ./budget/... ./compaction/... ./frames/...

.PHONY: test vet check-deps bench fmt run build example inspect

## run: start the StateIndex server on ./data/stateindex.db (Ctrl-C stops it cleanly)
run:
	$(GO) run ./cmd/stateindex serve --data ./data

## build: the stateindex binary in ./bin
build:
	$(GO) build -o bin/stateindex ./cmd/stateindex

## example: the agent example (run it twice; kill it midway; then --approve)
example:
	$(GO) run ./examples/agent --data ./data/agent-example

## inspect: print the example's frame trees
inspect:
	$(GO) run ./cmd/stateindex inspect --data ./data/agent-example

## test: vet, check the pure core's imports, then every test with the race detector
test: vet check-deps
	$(GO) test -race -count=1 ./...

vet:
	$(GO) vet ./...

## check-deps: fail if a pure package depends on bbolt, protoactor or msgpack
check-deps:
	@bad=$$($(GO) list -deps $(PURE) | grep -E 'go.etcd.io/bbolt|protoactor|msgpack' || true); \
	if [ -n "$$bad" ]; then echo "pure core depends on: $$bad" >&2; exit 1; fi; \
	echo "check-deps: budget, compaction and frames import none of bbolt, protoactor, msgpack"

## bench: the store and core benchmarks (durable: they fsync)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fmt:
	gofmt -l -w .
