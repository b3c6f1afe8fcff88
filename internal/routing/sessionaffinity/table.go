package sessionaffinity

import (
	"sync"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// MaxSessions is how many sessions a Router remembers at most. A session that arrives
// while the table is full is not recorded; it is still placed by rendezvous hashing, so
// it stays on its endpoint unless the candidates change or the router had to retry
// elsewhere.
const MaxSessions = 1 << 20

// shardCount is the number of independently locked parts of a table.
const shardCount = 256

// table maps session hashes to the endpoint that last served them. Entries expire
// between ttl and ttl + touchEvery after their last use: while a session stays on its
// endpoint, its last use is written at most once per touchEvery (a hundredth of ttl), so
// that the requests of a busy session do not all write the table (a write moves the
// shard's memory between the cores that route).
//
// Synchronisation model: the table is split into shards by session hash; each shard's
// mutex guards its sessions and prunedAt, and is held only for map operations, never
// across calls into other packages. ttl, pruneEvery, touchEvery and shardCap are set at
// construction and only read afterwards.
type table struct {
	ttl time.Duration
	// pruneEvery is the least time between two sweeps of one shard.
	pruneEvery time.Duration
	// touchEvery is the least time between two writes of one session's lastUse while it
	// stays on its endpoint.
	touchEvery time.Duration
	// shardCap is how many sessions one shard holds at most.
	shardCap int
	shards   [shardCount]shard
}

// shard is one independently locked part of a table.
type shard struct {
	mu       sync.Mutex
	sessions map[uint64]session
	// prunedAt is when the shard was last swept of expired sessions.
	prunedAt time.Time
}

// session is what the table remembers of one session.
type session struct {
	endpoint endpoint.Key
	lastUse  time.Time
}

// newTable returns an empty table of at most maxSessions sessions that expire ttl (and
// at most a hundredth of it more) after their last use.
func newTable(ttl time.Duration, maxSessions int) *table {
	t := &table{ttl: ttl, pruneEvery: ttl / 10, touchEvery: ttl / 100, shardCap: max(maxSessions/shardCount, 1)}
	for i := range t.shards {
		t.shards[i].sessions = make(map[uint64]session)
	}
	return t
}

// shard returns the shard holding session id.
func (t *table) shard(id uint64) *shard { return &t.shards[id%shardCount] }

// lookup returns the endpoint of session id if the session was used no longer than ttl
// before now.
func (t *table) lookup(id uint64, now time.Time) (endpoint.Key, bool) {
	s := t.shard(id)
	s.mu.Lock()
	e, ok := s.sessions[id]
	s.mu.Unlock()
	if !ok || t.expired(e, now) {
		return endpoint.Key{}, false
	}
	return e.endpoint, true
}

// record remembers that session id was served by key at now. A session already on key
// whose last use was written less than touchEvery before now is left as it is. Else
// record first sweeps the session's shard of expired sessions if the last sweep is
// pruneEvery old, so a shard is swept at most once per pruneEvery. It records nothing if
// the session is new and its shard is still full.
func (t *table) record(id uint64, key endpoint.Key, now time.Time) {
	s := t.shard(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.sessions[id]; ok && e.endpoint == key && now.Sub(e.lastUse) < t.touchEvery {
		return
	}
	if now.Sub(s.prunedAt) >= t.pruneEvery {
		for sid, e := range s.sessions {
			if t.expired(e, now) {
				delete(s.sessions, sid)
			}
		}
		s.prunedAt = now
	}
	if _, known := s.sessions[id]; !known && len(s.sessions) >= t.shardCap {
		return
	}
	s.sessions[id] = session{endpoint: key, lastUse: now}
}

// expired reports whether e's last use was written more than ttl + touchEvery before
// now: then it was last used more than ttl before now.
func (t *table) expired(e session, now time.Time) bool {
	return now.Sub(e.lastUse) > t.ttl+t.touchEvery
}
