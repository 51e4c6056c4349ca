# Spark IM server. `make run` starts a whole local cluster; `make test` runs
# every test (unit + end-to-end against real MariaDB and Redis).
SHELL := /bin/bash
GO ?= go
BIN := bin
MODULES := pkg proto migrations gate logic deliver client tests bench
CMDS := gate/cmd/gate logic/cmd/logic logic/cmd/migrate deliver/cmd/deliver client/cmd/imcli client/cmd/imctl

.PHONY: all build build-failpoints run test unit e2e e2e-cluster chaos fuzz vet proto clean services test-deps bench bench-long deploy-check images warm-grpcurl helm tidb test-tidb test-galera weed

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./,$(CMDS))

# Binaries with failpoints compiled in, used by the e2e tests.
build-failpoints:
	@mkdir -p $(BIN)/failpoints
	$(GO) build -tags failpoints -o $(BIN)/failpoints/ $(addprefix ./,$(CMDS))

services:
	@deploy/dev/services.sh

# Nginx, Chromium and the browser SDK's npm packages for the e2e tests.
test-deps:
	@deploy/dev/test-deps.sh

run: build
	@deploy/dev/run.sh

vet:
	@unformatted=$$(gofmt -l $(MODULES)); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(addsuffix /...,$(addprefix ./,$(MODULES)))

# Packages with tests behind the failpoints build tag (//go:build
# failpoints): without the tag they never compile, so `unit` runs these
# packages a second time with it. Only these packages, to keep the run short.
FAILPOINT_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build.*failpoints' $(filter-out tests,$(MODULES)))))

unit: services
	source .run/services.env && $(GO) test -count=1 $(addsuffix /...,$(addprefix ./,$(filter-out tests,$(MODULES))))
	@if [ -z "$(FAILPOINT_PKGS)" ]; then echo "unit: no failpoints-tagged tests found"; exit 1; fi
	source .run/services.env && $(GO) test -count=1 -tags failpoints $(addprefix ./,$(FAILPOINT_PKGS))

# Tests that call t.Parallel() (the ones no timing bound depends on; the
# kill, outage, SIGTERM, lease, rate-limit and hostile-client tests stay
# serial) run this many at a time once the serial ones are done; they
# mostly wait for processes, so more than the 2 cores (decision 85).
E2E_PARALLEL ?= 4
e2e: services test-deps build-failpoints weed
	source .run/services.env && SPARK_WEED_BIN=$$(deploy/seaweedfs/build-weed.sh) SPARK_BIN_DIR=$(CURDIR)/$(BIN)/failpoints $(GO) test -count=1 -timeout 15m -parallel $(E2E_PARALLEL) $$($(GO) list ./tests/... | grep -v /tests/deploy$$)

# The deployment artifacts under deploy/, each exercised (tests/deploy,
# docs/operations.md "Deploying with systemd", "Containers"):
# systemd-analyze verify and security on the units and a cluster started
# from their ExecStart and EnvironmentFile; the images built with podman
# and inspected; the compose file loaded with compose-go; the Helm chart
# linted, rendered, decoded into the Kubernetes types and its config run
# as a cluster (docs/operations.md "Deploying with Helm"). Under two
# minutes once helm is built.
# The container images localhost/spark-{gate,logic,deliver,migrate}:dev,
# FROM scratch with a static binary built here (deploy/containers).
images: test-deps
	deploy/containers/build.sh dev

# helm v4.3.2 for the chart's tests, built from its Go module into
# .run/tools/helm-v4.3.2 once (about 7 minutes on a clean clone;
# decision 89) and reused after.
helm:
	@deploy/helm/build-helm.sh >/dev/null

# SeaweedFS's weed (the real S3 server of the media tests), built from
# its Go module into .run/tools/weed-<version> once and reused after.
weed:
	@deploy/seaweedfs/build-weed.sh >/dev/null

deploy-check: services test-deps build helm
	source .run/services.env && $(GO) test -count=1 -timeout 5m ./tests/deploy/

# The e2e tests whose behaviour depends on the Redis mode, each test
# cluster on a private 3-master Redis Cluster instead of one redis-server
# (decisions 71 and 85): every path through a Lua script, a MULTI, a
# pipeline across slots, a stream, a lease, a flush or a Redis outage.
# The others (gate carriers and caps, hostile clients, docs, dashboard,
# imcli, MySQL outages, start-up order) reach Redis through those same
# paths or not at all, and run in `e2e` only. A new test of such a path
# joins the list; the target fails when a name matches no test. `make
# test` runs this after `e2e`.
empty :=
space := $(empty) $(empty)
E2E_CLUSTER_TESTS = ^(TestExchangeAcrossGates|TestSenderOtherDevices|TestEveryRecipientDevice\
|TestGroupOf1000AcrossTwoGates|TestGroupPermissionsMembershipAndFlush|TestClientProtocolFriendsAndGroups\
|TestIdempotentSend|TestFirstMessageRace|TestOrderAcrossLogicInstances\
|TestOfflineConvergence|TestRedeliveryCountsOnce|TestReadAcrossDevices|TestRecall|TestDeleteForEveryone|TestRedisFlush\
|TestRateLimitEachClassRefusesPastItsBurstAndRecovers|TestRateLimitIsOneBucketAcrossTwoLogicProcesses|TestRateLimitFailedAuthsBlockTheAddressNotTheUser\
|TestLogicWithALostMachineLease.*|TestLogicSIGTERMUnderLoad.*|TestKillGateUnderLoad.*|TestKillLogicUnderLoad.*|TestKillDeliverUnderLoad.*\
|TestDeliverWithDeadGate|TestDeliverCrashBeforeAck|TestDeliverCrashMidPush|TestDeliverSIGTERM.*\
|TestEnqueueFailureThenRetry|TestSameDeviceKick|TestRedisStoppedTenSecondsUnderLoad.*\
|TestBusinessAPIOnline|TestBusinessAPIChangesAndSystemMessages|TestOfflinePushReachesOfflineDevicesOnceThroughAPNsFCMAndAGateway|TestOfflinePushCollapsesAGroupStormToOneNotificationPerDevice)$$
E2E_CLUSTER_RUN = $(subst $(space),,$(E2E_CLUSTER_TESTS))
e2e-cluster: services test-deps build-failpoints
	@want=$$(echo '$(E2E_CLUSTER_RUN)' | tr '|' '\n' | wc -l); got=$$($(GO) test -list '$(E2E_CLUSTER_RUN)' ./tests/e2e/ | grep -c '^Test'); \
	if [ "$$got" != "$$want" ]; then echo "e2e-cluster: E2E_CLUSTER_TESTS names $$want tests, $$got exist (one renamed?)"; exit 1; fi
	source .run/services.env && SPARK_E2E_REDIS=cluster SPARK_BIN_DIR=$(CURDIR)/$(BIN)/failpoints $(GO) test -count=1 -timeout 20m -parallel $(E2E_PARALLEL) -run '$(E2E_CLUSTER_RUN)' ./tests/e2e/

# tidb-server (TiDB v8.5.4) for the TiDB runs, built from deploy/tidb's
# own module into .run/tools/tidb-server-<version> once (about 6 minutes
# of both cores on a clean machine; a copy under ~/.cache/spark-tools is
# reused by later clones).
tidb:
	@deploy/tidb/build-tidb.sh >/dev/null

# The store, logic and e2e suites and the chaos run on TiDB's unistore
# (docs/operations.md "Running on TiDB"): TIDB_E2E_RUN narrows the e2e
# suite, TIDB_CHAOS=0 leaves out the chaos run.
test-tidb: services test-deps build-failpoints
	@deploy/tidb/test-tidb.sh

# The store, logic and e2e suites against a three-node MariaDB Galera
# cluster on loopback (tests/cmd/imgalera), then the chaos run that kills
# the writer node under load and fails over (docs/operations.md "Running
# on Galera"): GALERA_E2E_RUN narrows the e2e suite, GALERA_CHAOS=0 leaves
# out the chaos run. Needs root, galera-4 and rsync.
test-galera: services test-deps build-failpoints weed
	@deploy/galera/test-galera.sh

# The chaos runner (tests/chaos, docs/decisions.md 73, 85, 88): SPARK_CHAOS_DURATION
# (default 90s, and on until every kind of fault has happened) of mixed
# load on 3 gates, 2 logic and 2 deliver while
# processes are killed and Redis and MySQL stop, which must PASS the
# checker; then a shorter run with a deliver that drops a job, which must
# FAIL it. Verdicts and histories land in .run/artifacts/chaos/.
chaos: services test-deps build-failpoints
	$(GO) vet -tags chaos ./tests/chaos
	rm -f $${SPARK_ARTIFACTS_DIR:-.run/artifacts}/chaos/*/verdict.txt
	source .run/services.env && SPARK_BIN_DIR=$(CURDIR)/$(BIN)/failpoints $(GO) test -count=1 -tags chaos -timeout 25m -run 'TestChaos' ./tests/chaos; \
	status=$$?; for f in $${SPARK_ARTIFACTS_DIR:-.run/artifacts}/chaos/*/verdict.txt; do echo "== $$f"; cat "$$f"; done; exit $$status

# Two stages. The first runs its parts at once: vet and the failpoint
# build compute while the unit and deployment tests mostly wait on their
# servers. The second runs the cluster suites one after the other, as
# their serial tests' bounds need the CPUs to themselves (decisions 85, 88).
test:
	$(MAKE) services test-deps
	$(MAKE) -j4 --output-sync=target vet unit deploy-check build-failpoints warm-grpcurl weed
	$(MAKE) e2e e2e-cluster chaos

# Compiles the grpcurl that tests/e2e/api_docs_test.go pins (its
# grpcurlModule) into the Go build cache, so the e2e stage's own `go
# install` of it only links: on a fresh machine its first build is about
# 90 s of CPU, better spent while the unit tests wait on their servers.
warm-grpcurl:
	@mod=$$(sed -n 's/^const grpcurlModule = "\(.*\)"$$/\1/p' tests/e2e/api_docs_test.go); \
	if [ -z "$$mod" ]; then echo "warm-grpcurl: no grpcurlModule in tests/e2e/api_docs_test.go"; exit 1; fi; \
	d=$$(mktemp -d) && cd $$d && GOBIN=$$d GOFLAGS= GOWORK=off $(GO) install $$mod; status=$$?; rm -rf $$d; exit $$status

# Short fuzzing of every parser (the seed corpora run in `make test` too).
fuzz:
	$(GO) test -run=^$$ -fuzz=FuzzDecode -fuzztime=30s ./pkg/frame
	$(GO) test -run=^$$ -fuzz=FuzzCanonicalContent -fuzztime=30s ./pkg/protocol
	$(GO) test -run=^$$ -fuzz=FuzzReplyContent -fuzztime=15s ./pkg/protocol
	$(GO) test -run=^$$ -fuzz=FuzzParse -fuzztime=15s ./pkg/route
	$(GO) test -run=^$$ -fuzz=FuzzUnmarshal -fuzztime=15s ./pkg/jsonid
	$(GO) test -run=^$$ -fuzz=FuzzParse -fuzztime=15s ./gate/internal/proxyproto
	$(GO) test -run=^$$ -fuzz=FuzzParseWSHeader -fuzztime=15s ./gate/internal/server
	$(GO) test -run=^$$ -fuzz=FuzzDecodeBodies -fuzztime=30s ./logic/internal/gateway
	$(GO) test -run=^$$ -fuzz=FuzzVerify -fuzztime=15s ./pkg/stdwebhook
	$(GO) test -run=^$$ -fuzz=FuzzParseSecret -fuzztime=15s ./pkg/stdwebhook
	$(GO) test -run=^$$ -fuzz=FuzzParseRetryAfter -fuzztime=15s ./logic/internal/webhook
	$(GO) test -run=^$$ -fuzz=FuzzRegistrationValidate -fuzztime=15s ./logic/internal/push
	$(GO) test -run=^$$ -fuzz=FuzzSniff -fuzztime=15s ./logic/internal/media
	$(GO) test -run=^$$ -fuzz=FuzzKeyKind -fuzztime=15s ./logic/internal/media

proto:
	proto/gen.sh

# Benchmarks (never part of `make test`): the real binaries under load from
# bench/cmd/imbench, report in bench/results/<timestamp>/ and
# bench/results/latest.md. `bench` is the short profile (a few minutes);
# `bench-long` the sizes the targets are stated at.
bench: services build
	$(GO) build -o $(BIN)/imbench ./bench/cmd/imbench
	source .run/services.env && $(BIN)/imbench -profile short

bench-long: services build
	$(GO) build -o $(BIN)/imbench ./bench/cmd/imbench
	source .run/services.env && $(BIN)/imbench -profile long

clean:
	rm -rf $(BIN)
