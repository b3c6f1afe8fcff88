package cache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

const (
	stressPods     = 1000
	stressModels   = 100
	stressAdapters = 20
)

// enginePod returns pod i at addr serving model. Its labels repeat the address and model so
// that a reader can detect a torn value.
func enginePod(i int, addr, model string, ready bool) endpoint.Endpoint {
	return endpoint.Endpoint{
		Key:       endpoint.Key{Namespace: "ns", Name: "p" + strconv.Itoa(i)},
		Address:   addr,
		Port:      8000,
		BaseModel: model,
		Engine:    endpoint.EngineVLLM,
		Labels:    map[string]string{"switchboard.dev/model": model, "ip": addr},
		Ready:     ready,
	}
}

// churnPod returns pod i with a random address, model and readiness.
func churnPod(i int, r *rand.Rand) endpoint.Endpoint {
	addr := fmt.Sprintf("10.%d.%d.%d", r.IntN(256), i/256, i%256)
	return enginePod(i, addr, "m"+strconv.Itoa(r.IntN(stressModels)), r.IntN(10) != 0)
}

// checkPodsOf fails if eps is not a consistent list of routable pods serving model.
func checkPodsOf(model string, eps []*Pod) error {
	for i, p := range eps {
		if !p.Routable() {
			return fmt.Errorf("%s: unroutable pod %s listed", model, p.Key)
		}
		if p.Labels["ip"] != p.Address || p.Labels["switchboard.dev/model"] != p.BaseModel {
			return fmt.Errorf("%s: torn pod %s: %v vs %s/%s", model, p.Key, p.Labels, p.Address, p.BaseModel)
		}
		if p.BaseModel != model && !slices.Contains(p.Adapters, model) {
			return fmt.Errorf("%s: pod %s serves %s %v", model, p.Key, p.BaseModel, p.Adapters)
		}
		if i > 0 && eps[i-1].Key.Name >= p.Key.Name {
			return fmt.Errorf("%s: endpoints not sorted or duplicated at %s", model, p.Key)
		}
		if m := p.Metrics(); m != nil && m.Waiting != 2*m.Running {
			return fmt.Errorf("%s: torn metrics on %s: %+v", model, p.Key, *m)
		}
	}
	return nil
}

func TestStressReadersNeverSeeTornSnapshots(t *testing.T) {
	duration := 2 * time.Second
	if testing.Short() {
		duration = 200 * time.Millisecond
	}
	c := New()
	seed := rand.New(rand.NewPCG(1, 2))
	for i := range stressPods {
		c.UpsertPod(churnPod(i, seed))
	}

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		errOnce sync.Once
		readErr error
		reads   atomic.Int64
	)
	fail := func(err error) { errOnce.Do(func() { readErr = err; stop.Store(true) }) }

	wg.Go(func() { // pods: add, update, relabel, readiness, IP change, terminating, delete
		r := rand.New(rand.NewPCG(3, 4))
		for !stop.Load() {
			i := r.IntN(stressPods)
			switch e := churnPod(i, r); r.IntN(8) {
			case 0:
				c.DeletePod(e.Key)
			case 1:
				e.Terminating = true
				c.UpsertPod(e)
			default:
				c.UpsertPod(e)
			}
		}
	})
	wg.Go(func() { // adapter mappings
		r := rand.New(rand.NewPCG(5, 6))
		for !stop.Load() {
			a := endpoint.Key{Namespace: "ns", Name: "lora" + strconv.Itoa(r.IntN(stressAdapters))}
			if r.IntN(5) == 0 {
				c.DeleteAdapter(a)
				continue
			}
			instances := make([]string, r.IntN(20))
			for j := range instances {
				instances[j] = "p" + strconv.Itoa(r.IntN(stressPods))
			}
			c.SetAdapterInstances(a, "m"+strconv.Itoa(r.IntN(stressModels)), instances)
		}
	})
	wg.Go(func() { // engine model listings
		r := rand.New(rand.NewPCG(10, 11))
		for !stop.Load() {
			k := endpoint.Key{Namespace: "ns", Name: "p" + strconv.Itoa(r.IntN(stressPods))}
			p, ok := c.Pod(k)
			if !ok {
				continue
			}
			if r.IntN(5) == 0 {
				c.ForgetModelListing(p)
				continue
			}
			models := []ListedModel{{ID: p.BaseModel}}
			for range r.IntN(3) {
				parent := p.BaseModel
				if r.IntN(4) == 0 { // an adapter of another base, which must be ignored
					parent = "m" + strconv.Itoa(r.IntN(stressModels))
				}
				models = append(models, ListedModel{ID: "lora" + strconv.Itoa(r.IntN(stressAdapters)), Parent: parent})
			}
			c.SetModelListing(p, time.Now(), models)
		}
	})
	wg.Go(func() { // metrics scrapes
		r := rand.New(rand.NewPCG(7, 8))
		for !stop.Load() {
			k := endpoint.Key{Namespace: "ns", Name: "p" + strconv.Itoa(r.IntN(stressPods))}
			if p, ok := c.Pod(k); ok {
				running := float64(r.IntN(100))
				c.SetMetrics(p, endpoint.Metrics{Running: running, Waiting: 2 * running, ScrapedAt: time.Now()})
			}
		}
	})
	for g := range 64 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for !stop.Load() {
				var model string
				if r.IntN(4) == 0 {
					model = "lora" + strconv.Itoa(r.IntN(stressAdapters))
				} else {
					model = "m" + strconv.Itoa(r.IntN(stressModels))
				}
				m, ok := c.Model(model)
				if !ok {
					continue
				}
				held := m.endpoints.Pods
				before := slices.Clone(held)
				if err := checkPodsOf(model, m.Endpoints()); err != nil {
					fail(err)
					return
				}
				if !slices.IsSorted(c.Models()) {
					fail(fmt.Errorf("model names not sorted"))
					return
				}
				// The writers have had time to run: the snapshot we hold must not
				// have changed under us.
				if !slices.Equal(before, held) {
					fail(fmt.Errorf("%s: published endpoint slice mutated", model))
					return
				}
				reads.Add(1)
			}
		})
	}

	timer := time.AfterFunc(duration, func() { stop.Store(true) })
	defer timer.Stop()
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	if reads.Load() == 0 {
		t.Fatal("readers made no progress")
	}
	t.Logf("%d consistent reads in %v", reads.Load(), duration)
}
