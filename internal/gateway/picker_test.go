package gateway_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/extproc"
	"github.com/switchboard-llm/switchboard/internal/gateway"
	"github.com/switchboard-llm/switchboard/internal/routing/strategies"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestExtProcPicker checks the gateway's Endpoint Picker Protocol picker on three engine
// pods that each take one request at a time, with no queue.
func TestExtProcPicker(t *testing.T) {
	const pickNS = "picker"
	c := testenv.Start(t)
	c.Create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pickNS}})
	var engines []string
	for i, host := range []string{"127.0.0.100", "127.0.0.101", "127.0.0.102"} {
		e := testenv.EngineProcess(t, host, "llama-3-8b")
		engines = append(engines, e)
		c.EnginePod(t, pickNS, "llama-"+strconv.Itoa(i), "llama-3-8b", e, nil)
	}
	g, view := runGateway(t, c, gateway.Options{Limits: strategies.Limits{MaxInFlight: 1}})
	picker := g.Picker(gateway.PickScope{Namespace: pickNS})
	testenv.WaitUntil(t, waitTimeout, "the cache holds the three pods", func() bool {
		m, ok := view.Model("llama-3-8b")
		return ok && m.PodSet().Len() == 3
	})
	body := chatBody("llama-3-8b", false)
	headers := http.Header{":path": {"/v1/chat/completions"}, "Content-Type": {"application/json"}}
	pick := func(t *testing.T, subset ...string) (extproc.Pick, error) {
		t.Helper()
		req := extproc.Request{Headers: headers, Body: body}
		if subset != nil {
			req.Subset = make(map[string]bool)
			for _, e := range subset {
				req.Subset[e] = true
			}
		}
		p, err := picker.Pick(context.Background(), req)
		if err == nil {
			t.Cleanup(p.Reservation.Release)
		}
		return p, err
	}

	t.Run("lists the other pods as fallbacks, least loaded first", func(t *testing.T) {
		busy, err := pick(t, engines[2])
		if err != nil {
			t.Fatal(err)
		}
		p, err := pick(t)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Reservation.Release()
		busy.Reservation.Release()
		if len(p.Endpoints) != 3 || p.Endpoints[0] == engines[2] || p.Endpoints[2] != engines[2] {
			t.Errorf("endpoints = %v, want the primary, the idle pod, then %s which was busy", p.Endpoints, engines[2])
		}
	})

	t.Run("picks only from the subset", func(t *testing.T) {
		for _, e := range engines {
			p, err := pick(t, e, "192.0.2.1:8000")
			if err != nil {
				t.Fatal(err)
			}
			p.Reservation.Release()
			if !slices.Equal(p.Endpoints, []string{e}) {
				t.Errorf("endpoints for the subset {%s, 192.0.2.1:8000} = %v, want [%s]", e, p.Endpoints, e)
			}
		}
	})

	t.Run("a subset without pods of the scope is 503, an unknown model 404", func(t *testing.T) {
		if _, err := pick(t, "192.0.2.1:8000"); httpStatus(err) != http.StatusServiceUnavailable {
			t.Errorf("pick in an ineligible subset: %v, want 503", err)
		}
		_, err := picker.Pick(context.Background(), extproc.Request{Headers: headers, Body: chatBody("no-such-model", false)})
		if httpStatus(err) != http.StatusNotFound {
			t.Errorf("pick of an unknown model: %v, want 404", err)
		}
	})

	t.Run("sheds with 429 when every pod is at its cap", func(t *testing.T) {
		for range engines {
			p, err := pick(t)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Reservation.Release()
		}
		if _, err := pick(t); httpStatus(err) != http.StatusTooManyRequests {
			t.Errorf("pick with every pod full: %v, want 429", err)
		}
	})

	t.Run("a fallback that served holds the reservation", func(t *testing.T) {
		p, err := pick(t)
		if err != nil {
			t.Fatal(err)
		}
		primary, fallback := p.Endpoints[0], p.Endpoints[1]
		p.Reservation.Served(fallback)
		if got := inFlight(t, view); got[primary] != 0 || got[fallback] != 1 {
			t.Errorf("in flight after %s served = %v, want 1 on it and none on the primary %s", fallback, got, primary)
		}
		p.Reservation.Served(primary) // a second report changes nothing
		if got := inFlight(t, view); got[fallback] != 1 {
			t.Errorf("in flight after a second report = %v, want 1 on %s", got, fallback)
		}
		p.Reservation.Release()
		if got := inFlight(t, view); got[primary]+got[fallback] != 0 {
			t.Errorf("in flight after the release = %v, want none", got)
		}
	})

	t.Run("a streamed answer decodes where it is served, from its first bytes", func(t *testing.T) {
		streamed := func() (p extproc.Pick, primary, fallback string) {
			p, err := picker.Pick(context.Background(), extproc.Request{Headers: headers, Body: chatBody("llama-3-8b", true)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Reservation.Release)
			return p, p.Endpoints[0], p.Endpoints[1]
		}
		p, primary, _ := streamed()
		if got := decoding(t, view); got[primary] != 0 {
			t.Errorf("decoding before the answer began: %v", got)
		}
		p.Reservation.Answer([]byte("data: {}\n\n"))
		p.Reservation.Answer([]byte("data: {}\n\n"))
		if got := decoding(t, view); got[primary] != 1 {
			t.Errorf("decoding once the answer began = %v, want 1 on the primary %s", got, primary)
		}
		p.Reservation.Release()
		if got := decoding(t, view); got[primary] != 0 {
			t.Errorf("decoding after the release = %v, want none", got)
		}

		p, primary, fallback := streamed()
		p.Reservation.Served(fallback)
		p.Reservation.Answer([]byte("data: {}\n\n"))
		if got := decoding(t, view); got[primary] != 0 || got[fallback] != 1 {
			t.Errorf("decoding after %s served = %v, want 1 on it and none on the primary %s", fallback, got, primary)
		}
		p.Reservation.Release()

		p, err := pick(t) // an answer that does not stream
		if err != nil {
			t.Fatal(err)
		}
		p.Reservation.Answer([]byte(`{"choices":[]}`))
		if got := decoding(t, view); got[p.Endpoints[0]] != 0 {
			t.Errorf("decoding after a non-streamed answer began = %v, want none", got)
		}
	})
}

// inFlight returns the requests in flight on each llama-3-8b pod, by "ip:port".
func inFlight(t *testing.T, view *cache.Gateway) map[string]int64 {
	return perPod(t, view, func(pod *cache.Pod) int64 { return pod.Load().InFlight() })
}

// decoding returns whether a request decodes (1) or not (0) on each llama-3-8b pod, by
// "ip:port".
func decoding(t *testing.T, view *cache.Gateway) map[string]int64 {
	return perPod(t, view, func(pod *cache.Pod) int64 {
		_, rank := pod.DecodeEnd(time.Now(), 1, 0.01, 1)
		return int64(rank)
	})
}

// perPod returns f of each llama-3-8b pod, by "ip:port".
func perPod(t *testing.T, view *cache.Gateway, f func(*cache.Pod) int64) map[string]int64 {
	t.Helper()
	m, ok := view.Model("llama-3-8b")
	if !ok {
		t.Fatal("llama-3-8b is not in the cache")
	}
	got := map[string]int64{}
	for _, pod := range m.PodSet().Pods {
		got[net.JoinHostPort(pod.Address, strconv.Itoa(int(pod.Port)))] = f(pod)
	}
	return got
}

// httpStatus is the HTTP status err carries, 0 for none.
func httpStatus(err error) int {
	var se interface{ HTTPStatus() int }
	if errors.As(err, &se) {
		return se.HTTPStatus()
	}
	return 0
}
