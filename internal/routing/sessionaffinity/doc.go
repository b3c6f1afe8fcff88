// Package sessionaffinity implements the session-affinity routing strategy: requests
// that carry a session header go to the endpoint that served the session before, as long
// as that endpoint is still a candidate.
//
// A new session, or one whose endpoint has left or is not routable right now, is placed
// by rendezvous (highest-random-weight) hashing of the session id and the endpoint keys.
// Every gateway replica therefore places a new session on the same endpoint without
// sharing state, and an endpoint joining or leaving moves only the sessions that must
// move: those the new endpoint now wins, or those of the endpoint that left.
//
// The package owns the bounded, expiring table of sessions one Router remembers. It
// does not read engine metrics or load: a request without the session header is
// undecided (routing.ErrUndecided) and the policy's fallback places it.
package sessionaffinity
