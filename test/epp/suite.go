package epp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// Pool is what the suite needs to know about the picker's pool.
type Pool struct {
	// Model is a model that every endpoint serves; required.
	Model string
	// Endpoints are the "ip:port" of the pool's ready endpoints; at least two. Several
	// on one IP are the ranks of one pod, each an endpoint of its own (a data-parallel
	// engine on each of the pool's targetPorts); the rank tests need such a pod and are
	// skipped without one.
	Endpoints []string
	// UnknownModel is a model that no endpoint serves; "epp-suite-unknown-model" if empty.
	UnknownModel string
	// MinFallbacks is how many fallbacks the picker lists at least after its pick when
	// enough endpoints are eligible; 0 accepts a pick without fallbacks.
	MinFallbacks int
	// OneAtATime says that each endpoint takes one request at a time: the picker never
	// picks a busy endpoint first and sheds a request (429) whose eligible endpoints are
	// all busy, without queueing it. The shedding, served and release tests need it;
	// without it they are skipped.
	OneAtATime bool
	// Timeout bounds each wait of the suite (readiness, a reservation's release); 30s if
	// zero.
	Timeout time.Duration
}

// unreachable is an endpoint of no pool (TEST-NET-1).
const unreachable = "192.0.2.1:8000"

// suite is one run against a picker.
type suite struct {
	pool   Pool
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
}

// Run runs the Endpoint Picker Protocol suite against the picker serving plaintext gRPC
// at target, whose pool is described by pool. Every subtest leaves no request in flight.
func Run(t *testing.T, target string, pool Pool) {
	if pool.Model == "" || len(pool.Endpoints) < 2 {
		t.Fatal("the EPP suite needs a model and at least two endpoints")
	}
	if pool.UnknownModel == "" {
		pool.UnknownModel = "epp-suite-unknown-model"
	}
	if pool.Timeout <= 0 {
		pool.Timeout = 30 * time.Second
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial the picker at %s: %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s := &suite{pool: pool, client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(conn)}

	// Health first: the other tests need a ready picker.
	t.Run("Health", s.testHealth)
	for _, mode := range []extprocfilterv3.ProcessingMode_BodySendMode{buffered, fullDuplex} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Run("PicksFromThePoolWithoutSubset", func(t *testing.T) { s.testPool(t, mode) })
			t.Run("HeaderAndMetadataAreIdentical", func(t *testing.T) { s.testIdentical(t, mode) })
			t.Run("PicksOnlyFromTheSubset", func(t *testing.T) { s.testSubset(t, mode) })
			t.Run("EmptySubsetIs503", func(t *testing.T) {
				s.testRejected(t, mode, []string{}, s.chat(pool.Model), http.StatusServiceUnavailable)
			})
			t.Run("IneligibleSubsetIs503", func(t *testing.T) {
				s.testRejected(t, mode, []string{unreachable}, s.chat(pool.Model), http.StatusServiceUnavailable)
			})
			t.Run("UnknownModelIs404", func(t *testing.T) { s.testRejected(t, mode, nil, s.chat(pool.UnknownModel), http.StatusNotFound) })
			t.Run("FallbacksAreOrderedDistinctAndInTheSubset", func(t *testing.T) { s.testFallbacks(t, mode) })
			t.Run("EachRankIsAnEndpoint", func(t *testing.T) { s.testRanks(t, mode) })
			t.Run("BodyPassesThrough", func(t *testing.T) { s.testBody(t, mode) })
		})
	}
	t.Run("ShedIs429", s.needsOneAtATime(s.testShed))
	t.Run("ServedFallbackFreesThePrimary", s.needsOneAtATime(s.testServed))
	t.Run("ReservationReleasedWhenStreamEnds", s.needsOneAtATime(s.testRelease))
}

// chat is an OpenAI chat completion body for model.
func (s *suite) chat(model string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Say hello to the EPP suite."}],"max_tokens":4}`, model)
}

// needsOneAtATime skips test unless the pool's endpoints take one request at a time.
func (s *suite) needsOneAtATime(test func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		if !s.pool.OneAtATime {
			t.Skip("the pool's endpoints are not one-at-a-time (Pool.OneAtATime)")
		}
		test(t)
	}
}

// routed sends one request in mode and checks that it is routed within the pool (and
// subset, when not nil); it returns the endpoints and the open exchange.
func (s *suite) routed(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode, subset []string) ([]string, *exchange) {
	t.Helper()
	x := s.open(t, mode)
	o := x.request(s.chat(s.pool.Model), subset)
	if o.status != 0 {
		t.Fatalf("request answered %d, want it routed", o.status)
	}
	eps := o.endpoints()
	if len(eps) == 0 {
		t.Fatalf("routed without a destination header (metadata %q)", o.metadata)
	}
	allowed := s.pool.Endpoints
	if subset != nil {
		allowed = subset
	}
	for _, e := range eps {
		if !slices.Contains(allowed, e) {
			t.Fatalf("destination %v names %s, outside %v", eps, e, allowed)
		}
	}
	return eps, x
}

// finish plays a served response on x and ends its stream.
func finish(x *exchange, served string) {
	x.t.Helper()
	x.respond(served)
	x.close()
}

func (s *suite) testHealth(t *testing.T) {
	for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		testenv.WaitUntil(t, s.pool.Timeout, svc+" is SERVING", func() bool {
			resp, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
		})
	}
}

func (s *suite) testPool(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) {
	_, x := s.routed(t, mode, nil)
	finish(x, "")
}

func (s *suite) testIdentical(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) {
	x := s.open(t, mode)
	o := x.request(s.chat(s.pool.Model), nil)
	if o.status != 0 || o.header == "" || o.header != o.metadata {
		t.Errorf("destination header %q, envoy.lb metadata %q (status %d); want both set and identical", o.header, o.metadata, o.status)
	}
	finish(x, "")
}

func (s *suite) testSubset(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) {
	for _, e := range s.pool.Endpoints {
		eps, x := s.routed(t, mode, []string{e, unreachable})
		if eps[0] != e {
			t.Errorf("subset {%s, %s}: destination %v, want %s first", e, unreachable, eps, e)
		}
		finish(x, eps[0])
	}
}

func (s *suite) testRejected(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode, subset []string, body string, want int) {
	x := s.open(t, mode)
	if o := x.request(body, subset); o.status != want {
		t.Errorf("answer: status %d destination %q, want an immediate %d", o.status, o.header, want)
	}
}

func (s *suite) testFallbacks(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) {
	check := func(subset []string, eligible int) {
		t.Helper()
		eps, x := s.routed(t, mode, subset)
		defer finish(x, eps[0])
		if len(slices.Compact(slices.Sorted(slices.Values(eps)))) != len(eps) {
			t.Errorf("destination %v lists an endpoint twice", eps)
		}
		if want := min(s.pool.MinFallbacks, eligible-1); len(eps)-1 < want {
			t.Errorf("destination %v has %d fallbacks, want at least %d", eps, len(eps)-1, want)
		}
	}
	check(nil, len(s.pool.Endpoints))
	check(s.pool.Endpoints[:2], 2)
}

func (s *suite) testRanks(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) {
	ranks := s.ranks()
	if ranks == nil {
		t.Skip("no two endpoints of the pool share an IP (Pool.Endpoints)")
	}
	for _, r := range ranks {
		eps, x := s.routed(t, mode, []string{r})
		if !slices.Equal(eps, []string{r}) {
			t.Errorf("subset {%s}: destination %v, want exactly that rank", r, eps)
		}
		finish(x, eps[0])
	}
	// routed checks that the pick and the fallbacks are the pod's ranks.
	eps, x := s.routed(t, mode, ranks)
	defer finish(x, eps[0])
	if want := min(s.pool.MinFallbacks, len(ranks)-1); len(eps)-1 < want {
		t.Errorf("subset %v (one pod's ranks): destination %v, want at least %d other ranks of the pod as fallbacks", ranks, eps, want)
	}
}

// ranks returns the endpoints on the first IP of the pool's endpoints that has several,
// in the pool's order: the ranks of one pod; nil when every IP has one.
func (s *suite) ranks() []string {
	byHost := map[string][]string{}
	var hosts []string
	for _, e := range s.pool.Endpoints {
		host, _, _ := net.SplitHostPort(e)
		if byHost[host] == nil {
			hosts = append(hosts, host)
		}
		byHost[host] = append(byHost[host], e)
	}
	for _, host := range hosts {
		if len(byHost[host]) > 1 {
			return byHost[host]
		}
	}
	return nil
}

func (s *suite) testBody(t *testing.T, mode extprocfilterv3.ProcessingMode_BodySendMode) {
	x := s.open(t, mode)
	body := s.chat(s.pool.Model)
	o := x.request(body, nil)
	if o.status != 0 {
		t.Fatalf("request answered %d, want it routed", o.status)
	}
	if mode == fullDuplex && o.body != body {
		t.Errorf("body streamed back = %q, want the request's %q", o.body, body)
	}
	finish(x, o.endpoints()[0])
}

func (s *suite) testShed(t *testing.T) {
	one := []string{s.pool.Endpoints[0]}
	_, held := s.routed(t, fullDuplex, one)
	x := s.open(t, fullDuplex)
	if o := x.request(s.chat(s.pool.Model), one); o.status != http.StatusTooManyRequests {
		t.Errorf("request for a busy endpoint: status %d destination %q, want 429", o.status, o.header)
	}
	finish(held, one[0])
}

func (s *suite) testServed(t *testing.T) {
	two := s.pool.Endpoints[:2]
	first, x := s.routed(t, fullDuplex, two)
	if len(first) < 2 {
		t.Skipf("the picker listed no fallback (%v)", first)
	}
	// The fallback is serving: the primary is free again and the fallback busy.
	x.respondHeaders(first[1])
	second, y := s.routed(t, fullDuplex, two)
	if second[0] != first[0] {
		t.Errorf("while %s (a fallback) serves, the next pick = %v, want the freed primary %s first", first[1], second, first[0])
	}
	finish(y, second[0])
	x.respondBody()
	x.close()
}

func (s *suite) testRelease(t *testing.T) {
	one := []string{s.pool.Endpoints[0]}
	ends := []struct {
		name string
		end  func(x *exchange)
	}{
		{"response ends", func(x *exchange) { x.respond(one[0]) }},
		{"Envoy closes the stream", func(x *exchange) { _ = x.stream.CloseSend() }},
		{"stream cancelled", func(x *exchange) { x.cancel() }},
		{"response headers, then cancelled", func(x *exchange) {
			x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "200")}}})
			x.recv()
			x.cancel()
		}},
	}
	for _, tt := range ends {
		t.Run(tt.name, func(t *testing.T) {
			_, x := s.routed(t, fullDuplex, one)
			tt.end(x)
			testenv.WaitUntil(t, s.pool.Timeout, "the endpoint takes a request again", func() bool {
				y := s.open(t, fullDuplex)
				o := y.request(s.chat(s.pool.Model), one)
				defer y.cancel()
				if o.status == 0 {
					finish(y, one[0])
				}
				return o.status == 0
			})
		})
	}
}
