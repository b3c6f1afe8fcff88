# Switchboard — every target has a "## help" line; `make help` lists them.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

LOCALBIN ?= $(CURDIR)/bin
K8S_BIN ?= $(LOCALBIN)/k8s
KUBECONFIG_LOCAL ?= $(LOCALBIN)/kubeconfig

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.2
GATEWAY_API_VERSION ?= $(shell go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api)
GIE_VERSION ?= $(shell go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api-inference-extension)

IMG ?= switchboard:dev
GO_TEST_FLAGS ?= -race -count=1
# A count, not a duration: duration-based -fuzztime flakes with "context deadline
# exceeded" at its boundary on Go 1.26 (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 20000x

.PHONY: all
all: build ## Build every binary (the default).

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and the three processes' RBAC roles into config/ from the markers.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=switchboard-manager paths="./internal/controller/..." output:rbac:artifacts:config=config/rbac/manager
	$(CONTROLLER_GEN) rbac:roleName=switchboard-gateway paths="./internal/gateway/..." output:rbac:artifacts:config=config/rbac/gateway
	$(CONTROLLER_GEN) rbac:roleName=switchboard-metadata-service paths="./internal/metadata/..." output:rbac:artifacts:config=config/rbac/metadata-service

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: vendor-crds
vendor-crds: ## Vendor the Gateway API standard-channel CRDs and the Inference Extension's InferencePool CRD from the Go module cache into config/crd/.
	@hack/vendor-crds.sh sigs.k8s.io/gateway-api $(GATEWAY_API_VERSION) config/crd/standard gateway.networking.k8s.io_ config/crd/gateway-api
	@hack/vendor-crds.sh sigs.k8s.io/gateway-api-inference-extension $(GIE_VERSION) config/crd/bases inference.networking.k8s.io_ config/crd/inference-extension

.PHONY: verify-generated
verify-generated: $(CONTROLLER_GEN) ## Fail when generated files differ from what the API markers produce.
	@hack/verify-generated.sh manifests generate vendor-crds

.PHONY: fmt
fmt: ## Run gofmt on the module.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: test
test: tools verify-generated vet ## Run every test suite (unit and envtest, with -race), each fuzz target briefly and the Gateway API conformance suite (report in bin/conformance); builds bin/ tools first.
	KUBEBUILDER_ASSETS=$(K8S_BIN) go test $(GO_TEST_FLAGS) ./...
	@FUZZTIME=$(FUZZTIME) hack/fuzz.sh
	@$(MAKE) --no-print-directory conformance-run

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME inputs each (default 20000x; e.g. FUZZTIME=2000000x make fuzz).
	@FUZZTIME=$(FUZZTIME) hack/fuzz.sh

##@ Benchmarks

BENCHTIME ?= 1000x

BENCH_FLAGS ?=

.PHONY: bench
bench: build k8s-tools ## Routing quality of every strategy (8 engine-sims behind the real gateway), gateway overhead, proxy cost beside nginx and HAProxy (installed by hack/bench-peers.sh) and concurrency micro-benchmarks into docs/benchmarks.md, .json and PNG plots; BENCH_FLAGS adds bin/bench flags.
	@hack/bench-peers.sh
	$(LOCALBIN)/bench -root $(CURDIR) -gateway-benchtime $(BENCHTIME) $(BENCH_FLAGS)

.PHONY: bench-gateway
bench-gateway: k8s-tools ## Measure gateway overhead against engine-sim directly (latency p50/p99, req/s; short and 200 KB prompts, streaming and not).
	KUBEBUILDER_ASSETS=$(K8S_BIN) go test -run '^$$' -bench BenchmarkGatewayOverhead -benchtime $(BENCHTIME) ./internal/gateway/

##@ Conformance

CONFORMANCE_FLAGS ?=

.PHONY: conformance
conformance: k8s-tools ## Run the upstream Gateway API conformance suite (GATEWAY-HTTP, Core and the declared extended features) against the manager and gateway on a local control plane in a private network namespace; writes docs/conformance/ (report and summary), logs in bin/conformance/; CONFORMANCE_FLAGS adds the suite's flags (e.g. -run-test=HTTPRouteWeight).
	@CONFORMANCE_REPORT_DIR=$(CURDIR)/docs/conformance $(MAKE) --no-print-directory conformance-run

.PHONY: conformance-run
conformance-run: ## Run the conformance suite with its report in CONFORMANCE_REPORT_DIR (default bin/conformance), as make test does.
	@mkdir -p $(LOCALBIN)/conformance
	@KUBEBUILDER_ASSETS=$(K8S_BIN) hack/conformance.sh $(CONFORMANCE_FLAGS) > $(LOCALBIN)/conformance/suite.log 2>&1 && rc=0 || rc=$$?; \
	  grep -E '^    --- |^(PASS|FAIL|ok )|^\[conformance\]' $(LOCALBIN)/conformance/suite.log || true; \
	  sed -n '/^\*\*/p' $${CONFORMANCE_REPORT_DIR:-$(LOCALBIN)/conformance}/README.md 2>/dev/null; \
	  [ $$rc = 0 ] || echo "conformance: failed (rc $$rc); the suite's log is $(LOCALBIN)/conformance/suite.log"; exit $$rc

##@ Soak

.PHONY: soak
soak: k8s-tools ## Chaos soak, not part of make test (test/e2e, label soak): SOAK_DURATION (default 10m) of streamed and plain chat through two gateway replicas while pods churn, engines crash, the API server restarts, the manager's leader is killed and a gateway replica is rolled; prints and writes the counts to docs/soak.md, log in bin/soak.log.
	@mkdir -p $(LOCALBIN)
	@SWITCHBOARD_SOAK=1 SOAK_REPORT=$(CURDIR)/docs/soak.md KUBEBUILDER_ASSETS=$(K8S_BIN) go test $(GO_TEST_FLAGS) -timeout 3h ./test/e2e \
	  -run '^TestE2E$$' -ginkgo.label-filter=soak -ginkgo.v > $(LOCALBIN)/soak.log 2>&1 && rc=0 || rc=$$?; \
	  cat docs/soak.md 2>/dev/null; [ $$rc = 0 ] || echo "soak: failed (rc $$rc); its log is $(LOCALBIN)/soak.log"; exit $$rc

##@ Build

.PHONY: build
build: ## Build the binaries of cmd/ into bin/.
	go build -o $(LOCALBIN)/ ./cmd/...

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Local control plane

.PHONY: cluster-up
cluster-up: k8s-tools manifests ## Start etcd + kube-apiserver on loopback; kubeconfig at bin/kubeconfig.
	@hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the processes cluster-up started.
	@hack/cluster.sh down

##@ Demo

.PHONY: demo
demo: ## Run the whole system locally (control plane, 3 engine-sims, manager, gateway on 127.0.0.1:8080, metadata service on :8090) with sample traffic; DEMO_EXIT=1 stops after the report.
	@hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop a running demo from another shell (only the processes the demo started).
	@hack/demo.sh down

##@ Tools

.PHONY: tools
tools: $(CONTROLLER_GEN) $(KUSTOMIZE) k8s-tools ## Install every pinned tool into bin/.

.PHONY: k8s-tools
k8s-tools: ## Build kube-apiserver, kubectl and etcd into bin/k8s (cached per user).
	@hack/install-k8s.sh

$(CONTROLLER_GEN):
	@echo "[tools] installing controller-gen $(CONTROLLER_TOOLS_VERSION)"
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(KUSTOMIZE):
	@echo "[tools] installing kustomize $(KUSTOMIZE_VERSION)"
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
