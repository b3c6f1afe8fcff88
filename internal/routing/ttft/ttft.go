// Package ttft predicts, for each candidate endpoint of one routing decision, how long a
// request would wait for its first token there: the wait behind the engine's batch and
// queue, plus the prefill time of the prompt tokens the engine does not hold.
//
// Each engine's speed comes from its own metrics (endpoint.Profile, learnt from the
// differences between scrapes). The decision uses the mean of the candidates' learnt
// speeds, except where an engine's own differs from it by more than half again (other
// hardware, a slowed engine): closer differences are noise of the scrape windows. An
// engine whose speed is not learnt yet is assumed as fast as that mean, and when no
// candidate's is learnt, priors typical of an 8B model on one GPU stand in until the
// first scrapes show work.
//
// The package owns only the arithmetic of the prediction; the prefix-cache and
// least-latency algorithms choose with it.
package ttft

import (
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// Priors stand in for an engine's speed until some candidate's is learnt.
const (
	// PriorPrefillPerToken is the prefill time of one uncached prompt token, in seconds.
	PriorPrefillPerToken = 1e-4
	// PriorService is the time a request holds a slot of the engine, in seconds.
	PriorService = 2.0
	// PriorDecodePerToken is the time per output token, in seconds.
	PriorDecodePerToken = 0.02
)

// Engine is one candidate as a prediction reads it: the requests this process has in
// flight there and, when its metrics are fresh, what they say of its queue and speed.
type Engine struct {
	// InFlight is the requests this process has in flight on the engine.
	InFlight int64
	// Known reports whether the engine's metrics are fresh; Queue and Speed are zero
	// otherwise.
	Known bool
	Queue endpoint.Queue
	Speed endpoint.Speed
}

// engineOf returns c as a prediction reads it.
func engineOf(c *routing.Candidate) Engine {
	if m := c.Metrics; m != nil {
		return Engine{InFlight: c.InFlight, Known: true, Queue: m.Queue(), Speed: m.Profile.Speed()}
	}
	return Engine{InFlight: c.InFlight}
}

// Estimator predicts for the candidates of one decision. Build it with New or a Fleet
// for each decision; it is a value and safe to share while the decision lasts.
type Estimator struct {
	// fleet is the mean speed of the candidates whose speed is learnt, or the priors.
	fleet speed
	// learnt reports whether any candidate's speed is learnt.
	learnt bool
}

// Learnt reports whether some candidate's speed is learnt, rather than every prediction
// resting on the priors.
func (e *Estimator) Learnt() bool { return e.learnt }

// speed is an engine's rates, in seconds, as a decision uses them.
type speed struct {
	prefillPerToken, service, decodePerToken float64
}

// Fleet sums the learnt speeds of one decision's candidates. The zero value has seen
// none.
type Fleet struct {
	sum speed
	n   int
}

// Add counts the speed s of a candidate whose metrics are fresh.
func (f *Fleet) Add(s endpoint.Speed) {
	if s.Learnt {
		f.sum.prefillPerToken += s.PrefillPerToken
		f.sum.service += s.Service
		f.sum.decodePerToken += s.DecodePerToken
		f.n++
	}
}

// Estimator returns the Estimator for the candidates added.
func (f *Fleet) Estimator() Estimator {
	if f.n == 0 {
		return Estimator{fleet: speed{prefillPerToken: PriorPrefillPerToken, service: PriorService, decodePerToken: PriorDecodePerToken}}
	}
	k := 1 / float64(f.n)
	fleet := speed{prefillPerToken: f.sum.prefillPerToken * k, service: f.sum.service * k, decodePerToken: f.sum.decodePerToken * k}
	if fleet.decodePerToken == 0 {
		fleet.decodePerToken = PriorDecodePerToken
	}
	return Estimator{fleet: fleet, learnt: true}
}

// New returns an Estimator for cands.
func New(cands []routing.Candidate) Estimator {
	var f Fleet
	for i := range cands {
		if m := cands[i].Metrics; m != nil {
			f.Add(m.Profile.Speed())
		}
	}
	return f.Estimator()
}

// distinct is how far, as a ratio, an engine's learnt rate must differ from the fleet's
// to be its own: rates within it are the noise of a few seconds of scrapes (an engine
// counts a prefill's tokens and its time in different scrapes, and its mix of hits and
// misses changes by the second), and taking them at face value would send every request
// to whichever engine's noise looks fastest. Engines of other hardware differ by more.
const distinct = 1.5

// speed returns en's speed: the fleet's, with each of en's learnt rates that differs
// from the fleet's by more than the factor distinct in its place.
func (e *Estimator) speed(en *Engine) speed {
	s := e.fleet
	if !en.Known || !en.Speed.Learnt {
		return s
	}
	s.prefillPerToken = pick(en.Speed.PrefillPerToken, s.prefillPerToken)
	s.service = pick(en.Speed.Service, s.service)
	if en.Speed.DecodePerToken > 0 {
		s.decodePerToken = pick(en.Speed.DecodePerToken, s.decodePerToken)
	}
	return s
}

// pick returns own if it differs from fleet by more than the factor distinct, fleet
// otherwise.
func pick(own, fleet float64) float64 {
	if own > fleet*distinct || own*distinct < fleet {
		return own
	}
	return fleet
}

// TTFT returns the predicted time to first token, in seconds, of a request on c whose
// prompt has uncached tokens the engine is not expected to hold. The fixed part of a
// prefill is in the per-token rate (endpoint.Profile.PrefillPerToken).
func (e *Estimator) TTFT(c *routing.Candidate, uncached float64) float64 {
	en := engineOf(c)
	return e.Predict(&en, uncached, 0)
}

// Latency returns the predicted time, in seconds, until a request on c with uncached
// prompt tokens the engine is not expected to hold has generated output tokens.
func (e *Estimator) Latency(c *routing.Candidate, uncached, output float64) float64 {
	en := engineOf(c)
	return e.Predict(&en, uncached, output)
}

// Predict is Latency for the engine en.
func (e *Estimator) Predict(en *Engine, uncached, output float64) float64 {
	s := e.speed(en)
	return wait(en, s.service) + s.prefillPerToken*max(uncached, 0) + s.decodePerToken*max(output, 0)
}

// Wait returns the predicted time, in seconds, a request sent to c now would wait before
// the engine runs it (see wait).
func (e *Estimator) Wait(c *routing.Candidate) float64 {
	en := engineOf(c)
	return wait(&en, e.speed(&en).service)
}

// wait returns the predicted time, in seconds, a request sent to en now would wait
// before the engine runs it: the requests ahead of it, each freeing a slot after service
// over the number of slots on average.
//
// The engine holds, as far as anyone knows, the requests of its last scrape (running
// and waiting) plus those this process sent since, less those it saw finish since: at
// least the requests this process has in flight there. Where the engine's slot count is
// learnt (Profile.Slots), the requests beyond the slots are ahead; where it is not, the
// waiting requests and those sent since the scrape are, so that a burst spreads before
// any scrape shows it.
func wait(en *Engine, service float64) float64 {
	if !en.Known {
		return 0
	}
	q := &en.Queue
	sent := float64(en.InFlight - q.LocalInFlight)
	if slots := q.Slots; slots > 0 {
		load := max(float64(en.InFlight), q.Running+q.Waiting+sent)
		return max(load-slots+1, 0) * service / slots
	}
	return max(q.Waiting+sent, 0) * service / max(q.Running, 1)
}
