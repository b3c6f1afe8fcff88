package modeladapter

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
)

// candidate is what placement knows about one reachable candidate pod.
type candidate struct {
	// name is the pod's name.
	name string
	// adapters is how many adapters its engine reports loaded, this one included.
	adapters int
	// loaded reports whether its engine lists the adapter.
	loaded bool
	// stale reports that the loaded copy is not of spec.artifactURL (or not known to be).
	stale bool
}

// placement is the outcome of plan.
type placement struct {
	// keep are the pods that hold the adapter and keep it.
	keep []string
	// reload are the pods that hold a stale copy and keep the adapter: the caller unloads
	// it and loads it again from spec.artifactURL.
	reload []string
	// drop are the pods that hold the adapter beyond the target and unload it.
	drop []string
	// load are the pods without the adapter, most preferred first; the caller loads onto the
	// first ones until the target is met, moving on when a load fails.
	load []string
}

// plan decides where the adapter goes on the reachable candidates cands so that target
// pods hold it. Pods already holding it are kept first (no needless moves), fresh copies
// before stale ones, which are reloaded; the surplus is dropped from the pods with stale
// copies, then those with the most adapters; new pods are ordered by scheduler. shuffle
// randomises the order for the random scheduler.
func plan(cands []candidate, target int, scheduler v1alpha1.AdapterScheduler, shuffle func([]candidate)) placement {
	var loaded, free []candidate
	for _, c := range cands {
		if c.loaded {
			loaded = append(loaded, c)
		} else {
			free = append(free, c)
		}
	}
	var p placement
	slices.SortFunc(loaded, byFreshThenLeastAdapters)
	for i, c := range loaded {
		switch {
		case i >= target:
			p.drop = append(p.drop, c.name)
		case c.stale:
			p.reload = append(p.reload, c.name)
		default:
			p.keep = append(p.keep, c.name)
		}
	}
	slices.Sort(p.keep)
	slices.Sort(p.reload)
	if len(loaded) >= target {
		return p
	}
	if scheduler == v1alpha1.SchedulerRandom {
		if shuffle == nil {
			shuffle = shuffleCandidates
		}
		shuffle(free)
	} else {
		slices.SortFunc(free, byLeastAdapters)
	}
	for _, c := range free {
		p.load = append(p.load, c.name)
	}
	return p
}

// byFreshThenLeastAdapters orders fresh copies before stale ones, then by
// byLeastAdapters.
func byFreshThenLeastAdapters(a, b candidate) int {
	if a.stale != b.stale {
		if a.stale {
			return 1
		}
		return -1
	}
	return byLeastAdapters(a, b)
}

// byLeastAdapters orders candidates by adapter count, then by name.
func byLeastAdapters(a, b candidate) int {
	return cmp.Or(cmp.Compare(a.adapters, b.adapters), cmp.Compare(a.name, b.name))
}

// shuffleCandidates puts cs in random order.
func shuffleCandidates(cs []candidate) {
	rand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
}
