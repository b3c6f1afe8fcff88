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
// The wait counts the requests ahead beyond the engine's slots (Profile.Slots: those its
// pod declares, then the number running the first time the engine is seen queueing; for
// an engine with neither, the candidates' mean, or none), and how long the running
// requests still have to go. Where this process's answers there stream, it knows when
// each began decoding and so when each should finish (cache.Pod.DecodeEnd): after the
// engine's mean decode time (Profile.Decode; its service time while that is not known),
// or its max tokens at the engine's time per output token where that is shorter. The k-th request ahead waits for the k-th of those ends, and
// any beyond them for one more slot every service/slots. Otherwise one
// slot frees every service/slots when the running requests' starts are spread, but
// after a burst, which the mean age of this process's requests there shows, none does
// for most of a service time.
//
// The package owns only the arithmetic of the prediction; the prefix-cache and
// least-latency algorithms choose with it.
package ttft

import (
	"time"

	"github.com/switchboard-llm/switchboard/internal/cache"
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
	// Ages tells how far those requests have got; nil reads as none. A prediction asks
	// only when the engine's wait depends on it.
	Ages Ages
	// Known reports whether the engine's metrics are fresh; Queue and Speed are zero
	// otherwise.
	Known bool
	Queue endpoint.Queue
	Speed endpoint.Speed
	// Decode is the engine's mean decode time (endpoint.Profile.Decode), 0 when not
	// known or the metrics are not fresh.
	Decode float64
}

// Ages tells how far an engine's in-flight requests have got as of now: how long they
// have run on average (MeanAge), and how long until the k-th of those decoding is
// expected to finish, each decoding for decode seconds or its max tokens at perToken
// seconds each where shorter, with its rank, k or fewer, 0 when none decodes (DecodeEnd,
// as cache.Pod.DecodeEnd). cache.Pod is one.
type Ages interface {
	MeanAge(now time.Time) time.Duration
	DecodeEnd(now time.Time, k int, perToken, decode float64) (time.Duration, int)
}

// engineOf returns c as a prediction reads it.
func engineOf(c *routing.Candidate) Engine {
	en := Engine{InFlight: c.InFlight}
	if c.Pod != nil {
		en.Ages = c.Pod
	}
	if m := c.Metrics; m != nil {
		en.Known, en.Queue, en.Speed, en.Decode = true, m.Queue(), m.Profile.Speed(), m.Profile.Decode
	}
	return en
}

// Estimator predicts for the candidates of one decision. Build it with New or a Fleet
// for each decision; it is a value and safe to share while the decision lasts.
type Estimator struct {
	// fleet is the mean speed of the candidates whose speed is learnt, or the priors.
	fleet speed
	// learnt reports whether any candidate's speed is learnt.
	learnt bool
	// slots is the mean slot count of the candidates whose slots are learnt, 0 when
	// none's is.
	slots float64
	// leastPrefill is the least prefill rate any candidate is predicted at: the fleet's,
	// or a learnt one below it.
	leastPrefill float64
	// now is the time of the decision, for the candidates' ages.
	now time.Time
}

// PrefillFloor returns a time that no candidate's predicted time to first token for
// uncached prompt tokens falls below: their prefill at the least rate any candidate is
// predicted at, as waiting only adds. A decision that has a prediction below it for some
// candidate need not predict the candidates it would charge for as many tokens.
func (e *Estimator) PrefillFloor(uncached float64) float64 {
	return e.leastPrefill * max(uncached, 0)
}

// Learnt reports whether some candidate's speed is learnt, rather than every prediction
// resting on the priors.
func (e *Estimator) Learnt() bool { return e.learnt }

// speed is an engine's rates, in seconds, as a decision uses them.
type speed struct {
	prefillPerToken, service, decodePerToken float64
}

// Fleet sums the learnt speeds and slot counts of one decision's candidates. The zero
// value has seen none.
type Fleet struct {
	sum   speed
	n     int
	slots float64 // summed over the slotted candidates
	nSlot int
	// leastPrefill is the least learnt prefill rate added, valid while n > 0.
	leastPrefill float64
}

// Add counts the speed s and the slot count slots (endpoint.Queue.Slots, 0 when not
// learnt) of a candidate whose metrics are fresh.
func (f *Fleet) Add(s endpoint.Speed, slots float64) {
	if slots > 0 {
		f.slots += slots
		f.nSlot++
	}
	if s.Learnt {
		if f.n == 0 || s.PrefillPerToken < f.leastPrefill {
			f.leastPrefill = s.PrefillPerToken
		}
		f.sum.prefillPerToken += s.PrefillPerToken
		f.sum.service += s.Service
		f.sum.decodePerToken += s.DecodePerToken
		f.n++
	}
}

// AddCell counts the speed and slot count of the pod of hot cell h if its metrics were
// scraped at oldest (Unix nanoseconds) or later.
func (f *Fleet) AddCell(h *cache.Hot, oldest int64) {
	if h.ScrapedAt() >= oldest {
		f.Add(h.Speed(), h.Slots())
	}
}

// Estimator returns the Estimator for the candidates added, for a decision at now.
func (f *Fleet) Estimator(now time.Time) Estimator {
	var slots float64
	if f.nSlot > 0 {
		slots = f.slots / float64(f.nSlot)
	}
	if f.n == 0 {
		return Estimator{fleet: speed{prefillPerToken: PriorPrefillPerToken, service: PriorService, decodePerToken: PriorDecodePerToken},
			slots: slots, leastPrefill: PriorPrefillPerToken, now: now}
	}
	k := 1 / float64(f.n)
	fleet := speed{prefillPerToken: f.sum.prefillPerToken * k, service: f.sum.service * k, decodePerToken: f.sum.decodePerToken * k}
	if fleet.decodePerToken == 0 {
		fleet.decodePerToken = PriorDecodePerToken
	}
	return Estimator{fleet: fleet, learnt: true, slots: slots, leastPrefill: min(fleet.prefillPerToken, f.leastPrefill), now: now}
}

// New returns an Estimator for cands, for a decision at now.
func New(cands []routing.Candidate, now time.Time) Estimator {
	var f Fleet
	for i := range cands {
		if m := cands[i].Metrics; m != nil {
			f.Add(m.Profile.Speed(), m.Profile.Slots)
		}
	}
	return f.Estimator(now)
}

// distinct is how far, as a ratio, an engine's learnt rate must differ from the fleet's
// to be its own: rates within it are the noise of a few seconds of scrapes (an engine
// counts a prefill's tokens and its time in different scrapes, and its mix of hits and
// misses changes by the second), and taking them at face value would send every request
// to whichever engine's noise looks fastest. Engines of other hardware differ by more.
const distinct = 1.5

// rate returns the rate a prediction uses for an engine whose own is own and is learnt
// if learnt: own if it differs from fleet by more than the factor distinct, fleet
// otherwise.
func rate(learnt bool, own, fleet float64) float64 {
	if learnt && (own > fleet*distinct || own*distinct < fleet) {
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

// Predict is Latency for the engine en. Each of en's learnt rates that differs from the
// fleet's by more than the factor distinct stands in for the fleet's.
func (e *Estimator) Predict(en *Engine, uncached, output float64) float64 {
	learnt := en.Known && en.Speed.Learnt
	t := rate(learnt, en.Speed.PrefillPerToken, e.fleet.prefillPerToken) * max(uncached, 0)
	if ahead, slots := e.ahead(en); ahead > 0 {
		t += e.wait(en, ahead, slots)
	}
	return t + e.decode(learnt, en.Speed.DecodePerToken, output)
}

// decode returns the time, in seconds, to generate output tokens on an engine whose own
// time per output token is perToken, learnt if learnt.
func (e *Estimator) decode(learnt bool, perToken, output float64) float64 {
	if output <= 0 {
		return 0
	}
	return rate(learnt && perToken > 0, perToken, e.fleet.decodePerToken) * output
}

// FromCell is Latency for the engine whose hot cell is h, with n requests of this
// process in flight there, of the ages that ages tells, and its metrics fresh, read from
// the cell; with no output tokens, it is TTFT. Where the request would not wait (Idle),
// it reads the cell's Backlog, four words, and its time per output token only for output
// tokens, and never asks ages.
func (e *Estimator) FromCell(h *cache.Hot, ages Ages, n int64, uncached, output float64) float64 {
	b := h.Backlog()
	if t, idle := e.Idle(&b, n, uncached); idle {
		if output > 0 {
			t += e.decode(b.Learnt, h.DecodePerToken(), output)
		}
		return t
	}
	en := Engine{InFlight: n, Ages: ages, Known: true, Queue: h.Queue(), Speed: h.Speed(), Decode: h.Decode()}
	return e.Predict(&en, uncached, output)
}

// Idle is FromCell's TTFT for an engine whose metrics are fresh, with n requests of this
// process in flight and the Backlog b (cache.Hot.Backlog), and true, when a request
// would not wait there: its slots, or the fleet's where its own are not learnt, have
// room. It returns false otherwise. Unlike FromCell, it is cheap enough to inline, for
// a loop over thousands of cells to call FromCell only for the engines with a queue.
func (e *Estimator) Idle(b *cache.Backlog, n int64, uncached float64) (float64, bool) {
	if slots := e.slotsOf(b.Slots); slots <= 0 || slotted(n, b.Beyond, slots) > 0 {
		return 0, false
	}
	return rate(b.Learnt, b.PrefillPerToken, e.fleet.prefillPerToken) * max(uncached, 0), true
}

// Unknown returns TTFT for an engine whose metrics are not fresh.
func (e *Estimator) Unknown(uncached float64) float64 {
	return e.fleet.prefillPerToken * max(uncached, 0)
}

// Wait returns the predicted time, in seconds, a request sent to c now would wait before
// the engine runs it (see wait).
func (e *Estimator) Wait(c *routing.Candidate) float64 {
	en := engineOf(c)
	if ahead, slots := e.ahead(&en); ahead > 0 {
		return e.wait(&en, ahead, slots)
	}
	return 0
}

// ahead returns how many requests, counting one sent to en now, are ahead of the slot
// it would take, and the slots they wait for; 0 ahead means a slot is free.
//
// The engine holds, as far as anyone knows, the requests of its last scrape (running
// and waiting) plus those this process sent since, less those it saw finish since: at
// least the requests this process has in flight there. Where the engine's slot count is
// known (Profile.Slots, declared or learnt), the requests beyond the slots are ahead; an
// engine whose count is not known is taken to have the mean of the candidates' counts,
// as the engines behind one Service mostly run with one configuration. Where no
// candidate's is known, no engine has been seen queueing, and engines run hundreds of
// requests at once by default (vLLM's max_num_seqs, SGLang's max_running_requests): the
// requests sent since the scrape join its batch, and only a queue the scrape shows (an
// engine out of KV cache, or loading an adapter) is ahead, together with those sent
// since, the running requests taken for the slots. Until the first scrape that shows a
// queue, the load guard of the algorithm bounds a pile-on.
func (e *Estimator) ahead(en *Engine) (ahead, slots float64) {
	if !en.Known {
		return 0, 0
	}
	q := &en.Queue
	switch slots = e.slotsOf(q.Slots); {
	case slots > 0:
		return slotted(en.InFlight, cache.Beyond(*q), slots), slots
	case q.Waiting > 0:
		return q.Waiting + float64(en.InFlight-q.LocalInFlight), max(q.Running, 1)
	}
	return 0, 0
}

// slotsOf returns the slots of an engine whose learnt count is own (0: not learnt).
func (e *Estimator) slotsOf(own float64) float64 {
	if own > 0 {
		return own
	}
	return e.slots
}

// slotted returns how many requests are ahead of one sent now to an engine of slots
// slots, holding beyond requests (cache.Beyond) besides this process's n.
func slotted(n int64, beyond, slots float64) float64 {
	return float64(n) + beyond - slots + 1
}

// wait returns the predicted time, in seconds, a request sent to en now would wait
// before the engine runs it, with ahead requests (at least one) ahead of it for slots
// slots (see ahead): where requests of this process decode there, until the ahead-th of
// them is expected to finish, or the last of them when fewer decode, then for one more
// slot per request ahead beyond them; otherwise for the first of the running requests
// to finish (firstSlot), then for one more slot per request ahead of it. Past the
// requests whose ends are known, each slot frees after service over the number of
// slots on average.
func (e *Estimator) wait(en *Engine, ahead, slots float64) float64 {
	service := rate(en.Speed.Learnt, en.Speed.Service, e.fleet.service)
	if en.Ages != nil {
		perToken := rate(en.Speed.Learnt && en.Speed.DecodePerToken > 0, en.Speed.DecodePerToken, e.fleet.decodePerToken)
		decode := en.Decode
		if !(decode > 0) {
			decode = service
		}
		if until, rank := en.Ages.DecodeEnd(e.now, max(int(ahead), 1), perToken, decode); rank > 0 {
			return max(until.Seconds()+(ahead-float64(rank))*service/slots, 0)
		}
	}
	return e.firstSlot(en, service, slots) + (ahead-1)*service/slots
}

// firstSlot returns the predicted time, in seconds, until the first of the requests
// running on en finishes, each running for service. Where their starts are spread over
// the last service time, one finishes every service/slots; where they started together
// (a burst, or the pile-on before the slots were learnt), none finishes for most of a
// service time, and a request queued behind them waits that long while other engines
// may have slots free. The mean age of this process's requests on the engine tells the
// two apart: with starts spread evenly, the oldest has run twice the mean age. Without
// requests of this process there, the spread case is assumed; with requests of unknown
// ages (Engine.Ages nil), that of requests started together.
func (e *Estimator) firstSlot(en *Engine, service, slots float64) float64 {
	spread := service / slots
	if en.InFlight <= 0 {
		return spread
	}
	age := 0.0
	if en.Ages != nil {
		age = en.Ages.MeanAge(e.now).Seconds()
	}
	return min(max(service-2*age, spread), service)
}
