package endpoint

import (
	"cmp"
	"testing"
	"time"
)

func TestRoutable(t *testing.T) {
	tests := []struct {
		name string
		ep   Endpoint
		want bool
	}{
		{"ready with address", Endpoint{Address: "10.0.0.1", Ready: true}, true},
		{"not ready", Endpoint{Address: "10.0.0.1"}, false},
		{"no address", Endpoint{Ready: true}, false},
		{"terminating", Endpoint{Address: "10.0.0.1", Ready: true, Terminating: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.ep.Routable(); got != tt.want {
				t.Errorf("Routable() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestKeyString(t *testing.T) {
	if got := (Key{Namespace: "ns", Name: "p"}).String(); got != "ns/p" {
		t.Errorf("String() = %q, want ns/p", got)
	}
	if got := (Key{Namespace: "ns", Name: "p", Port: 8001}).String(); got != "ns/p:8001" {
		t.Errorf("rank String() = %q, want ns/p:8001", got)
	}
}

func TestKeyCompare(t *testing.T) {
	pod := Key{Namespace: "ns", Name: "p"}
	ordered := []Key{{Namespace: "a", Name: "z"}, pod, {Namespace: "ns", Name: "p", Port: 8001}, {Namespace: "ns", Name: "p", Port: 8002}, {Namespace: "ns", Name: "q"}}
	for i := range ordered {
		for j := range ordered {
			if got, want := ordered[i].Compare(ordered[j]), cmp.Compare(i, j); got != want {
				t.Errorf("%s.Compare(%s) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

func TestHistogramMean(t *testing.T) {
	if got := (Histogram{}).Mean(); got != 0 {
		t.Errorf("empty Mean() = %v, want 0", got)
	}
	if got := (Histogram{Count: 4, Sum: 2}).Mean(); got != 0.5 {
		t.Errorf("Mean() = %v, want 0.5", got)
	}
}

func TestMetricsStale(t *testing.T) {
	now := time.Unix(1000, 0)
	m := Metrics{ScrapedAt: now.Add(-time.Second)}
	if m.Stale(now, 2*time.Second) {
		t.Error("fresh snapshot reported stale")
	}
	if !m.Stale(now, 500*time.Millisecond) {
		t.Error("old snapshot not reported stale")
	}
}
