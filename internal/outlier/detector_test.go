package outlier_test

import (
	"slices"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/outlier"
)

// fakeClock is a settable time source.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// recorder records the detector's events.
type recorder struct {
	ejected  []time.Duration
	returned int
}

func (r *recorder) Ejected(_ endpoint.Key, _ string, d time.Duration, _ int) {
	r.ejected = append(r.ejected, d)
}
func (r *recorder) Returned(endpoint.Key, string) { r.returned++ }

func pod(name, addr string) *cache.Pod {
	return &cache.Pod{Endpoint: endpoint.Endpoint{Key: endpoint.Key{Namespace: "ns", Name: name}, Address: addr}}
}

func newDetector() (*outlier.Detector, *fakeClock, *recorder) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	rec := &recorder{}
	return outlier.New(clock.now, rec), clock, rec
}

var cfg = outlier.Config{ConsecutiveFailures: 3, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}

// fail records n failures of p.
func fail(d *outlier.Detector, p *cache.Pod, n int) {
	for range n {
		d.Failure(&p.Endpoint, cfg)
	}
}

func TestConsecutiveFailuresEject(t *testing.T) {
	d, _, rec := newDetector()
	p := pod("a", "10.0.0.1")
	fail(d, p, 2)
	if d.Ejected(&p.Endpoint) {
		t.Fatal("ejected after 2 of 3 failures")
	}
	if !d.Failure(&p.Endpoint, cfg) || !d.Ejected(&p.Endpoint) {
		t.Fatal("not ejected after 3 failures in a row")
	}
	if len(rec.ejected) != 1 || rec.ejected[0] != 10*time.Second {
		t.Errorf("ejection events = %v, want one of 10s", rec.ejected)
	}
	if n := d.EjectedCount(); n != 1 {
		t.Errorf("EjectedCount = %d, want 1", n)
	}
}

func TestSuccessResetsCount(t *testing.T) {
	d, _, _ := newDetector()
	p := pod("a", "10.0.0.1")
	for range 10 {
		fail(d, p, 2)
		d.Success(&p.Endpoint)
	}
	if d.Ejected(&p.Endpoint) {
		t.Fatal("ejected although no 3 failures were in a row")
	}
}

func TestBackOffGrowsAndIsCapped(t *testing.T) {
	d, clock, rec := newDetector()
	p := pod("a", "10.0.0.1")
	var want []time.Duration
	for i := 1; i <= 40; i++ {
		fail(d, p, 3)
		want = append(want, min(time.Duration(i)*10*time.Second, outlier.MinMaxEjectionTime))
		clock.advance(rec.ejected[len(rec.ejected)-1]) // fails again as soon as it returns
		if d.Ejected(&p.Endpoint) {
			t.Fatalf("still ejected after its ejection time, round %d", i)
		}
	}
	for i := range want {
		if rec.ejected[i] != want[i] {
			t.Fatalf("ejection %d lasted %v, want %v (all: %v)", i+1, rec.ejected[i], want[i], rec.ejected)
		}
	}
}

func TestBackOffDecaysWhileIn(t *testing.T) {
	d, clock, rec := newDetector()
	p := pod("a", "10.0.0.1")
	fail(d, p, 3)
	clock.advance(10 * time.Second)
	fail(d, p, 3) // second ejection: 20s
	clock.advance(20*time.Second + 25*time.Second)
	fail(d, p, 3) // in for 25s: two decays, back to the first ejection's length
	if got := rec.ejected; len(got) != 3 || got[1] != 20*time.Second || got[2] != 10*time.Second {
		t.Errorf("ejections = %v, want [10s 20s 10s]", got)
	}
}

func TestFailuresWhileEjectedDoNotExtend(t *testing.T) {
	d, _, rec := newDetector()
	p := pod("a", "10.0.0.1")
	fail(d, p, 9)
	if len(rec.ejected) != 1 {
		t.Errorf("ejections = %v, want one", rec.ejected)
	}
}

func TestAddressChangeResets(t *testing.T) {
	d, _, _ := newDetector()
	p := pod("a", "10.0.0.1")
	fail(d, p, 3)
	moved := pod("a", "10.0.0.2")
	if d.Ejected(&moved.Endpoint) {
		t.Fatal("a pod at a new address is still ejected")
	}
	fail(d, moved, 2)
	if d.Ejected(&moved.Endpoint) {
		t.Fatal("the old address's failures count for the new one")
	}
	if n := d.EjectedCount(); n != 0 {
		t.Errorf("EjectedCount = %d, want 0 after the address changed", n)
	}
	fail(d, moved, 1)
	if !d.Ejected(&moved.Endpoint) {
		t.Fatal("the new address is not ejected after 3 failures of its own")
	}
}

func TestFilter(t *testing.T) {
	names := func(ps []*cache.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Key.Name)
		}
		return out
	}
	tests := []struct {
		name    string
		percent int
		eject   []int // indexes of the 4 candidates ejected, in this order, 1s apart
		want    []string
	}{
		{"none ejected", 50, nil, []string{"a", "b", "c", "d"}},
		{"one ejected", 50, []int{1}, []string{"a", "c", "d"}},
		{"two ejected, within the cap", 50, []int{1, 3}, []string{"a", "c"}},
		{"three ejected, the soonest to return stays in", 50, []int{1, 3, 0}, []string{"b", "c"}},
		{"all ejected, the cap keeps half", 50, []int{0, 1, 2, 3}, []string{"a", "b"}},
		{"zero percent disables ejection", 0, []int{0, 1}, []string{"a", "b", "c", "d"}},
		{"hundred percent leaves all out", 100, []int{0, 1, 2, 3}, nil},
		{"a share below one endpoint leaves none out", 20, []int{2}, []string{"a", "b", "c", "d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, clock, _ := newDetector()
			cands := []*cache.Pod{pod("a", "1"), pod("b", "2"), pod("c", "3"), pod("d", "4")}
			for _, i := range tt.eject {
				fail(d, cands[i], 3)
				clock.advance(time.Second)
			}
			c := cfg
			c.MaxEjectionPercent = tt.percent
			got := names(d.Filter(cands, c))
			if all := names(cands); !slices.Equal(all, []string{"a", "b", "c", "d"}) {
				t.Errorf("Filter rewrote its input, shared by other requests: %v", all)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Filter = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("Filter = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestReturnIsReported(t *testing.T) {
	d, clock, rec := newDetector()
	p := pod("a", "10.0.0.1")
	fail(d, p, 3)
	clock.advance(10 * time.Second)
	d.Filter([]*cache.Pod{p, pod("b", "2")}, cfg)
	d.Filter([]*cache.Pod{p, pod("b", "2")}, cfg)
	if rec.returned != 1 {
		t.Errorf("returns reported = %d, want 1", rec.returned)
	}
	if n := d.EjectedCount(); n != 0 {
		t.Errorf("EjectedCount = %d, want 0", n)
	}
}

func BenchmarkFilterNoneEjected(b *testing.B) {
	d, _, _ := newDetector()
	cands := []*cache.Pod{pod("a", "1"), pod("b", "2"), pod("c", "3"), pod("d", "4")}
	for b.Loop() {
		d.Filter(cands, cfg)
	}
}
