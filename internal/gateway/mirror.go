package gateway

import (
	"context"
	"io"
	"net/http"

	"github.com/switchboard-llm/switchboard/internal/routetable"
)

// mirror sends a copy of r, after the rule's filters, to a pod of each of the rule's
// RequestMirror backends, for the share of requests each asks for. Copies are sent in
// the background and their responses discarded; when maxMirrorsInFlight copies are
// already in flight, a copy is dropped rather than delaying the request.
func (g *Gateway) mirror(r *http.Request, rule *routetable.Rule, prefix string, body []byte) {
	for _, m := range rule.Mirrors {
		if m.Denominator <= 0 || m.Numerator <= 0 || g.opts.Random(int(m.Denominator)) >= int(m.Numerator) {
			continue
		}
		svc, cands := g.candidates(m.Backend, nil, nil)
		if cands.Len() == 0 {
			continue
		}
		pod := cands.Pods[g.opts.Random(cands.Len())]
		port, _ := svc.TargetPort(m.Port, pod)
		select {
		case g.mirrors <- struct{}{}:
		default:
			continue
		}
		// The copy outlives the client's request, bounded by the upstream timeout.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), g.opts.UpstreamTimeout)
		out := upstreamRequest(ctx, r, pod.Address, port, body, nil)
		rule.Filters.ModifyRequest(out, prefix)
		go func() {
			defer func() { <-g.mirrors }()
			defer cancel()
			resp, err := g.transportFor(svc, m.Port).RoundTrip(out)
			if err != nil {
				g.log.V(1).Info("Mirrored request failed", "endpoint", pod.Key.String(), "error", err.Error())
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}()
	}
}
