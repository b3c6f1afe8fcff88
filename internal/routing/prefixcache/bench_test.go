package prefixcache_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/routing"
	"github.com/switchboard-llm/switchboard/internal/routing/prefixcache"
	"github.com/switchboard-llm/switchboard/internal/routing/routingtest"
)

// benchPrompt returns a prompt of size bytes that differs from other seeds' in its first
// block.
func benchPrompt(seed, size int) string {
	var sb strings.Builder
	sb.Grow(size)
	for i := 0; sb.Len() < size; i++ {
		fmt.Fprintf(&sb, "conversation %d, sentence %d: the quick brown fox jumps over the lazy dog.\n", seed, i)
	}
	return sb.String()[:size]
}

var promptSizes = []struct {
	name  string
	bytes int
}{{"4KB", 4 << 10}, {"32KB", 32 << 10}, {"200KB", 200 << 10}}

func BenchmarkBlockHashes(b *testing.B) {
	for _, size := range promptSizes {
		prompt := benchPrompt(0, size.bytes)
		dst := make([]uint64, 0, size.bytes/64)
		b.Run("prompt="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(prompt)))
			for b.Loop() {
				dst = prefixcache.BlockHashes("llama", prompt, prefixcache.DefaultBlockSize, dst[:0])
			}
		})
	}
}

// BenchmarkPrefixIndex measures one Add (a prompt's blocks, all new, into an endpoint
// whose set is full, so each insertion evicts) and one Match (of a prompt the endpoint
// holds entirely, the longest scan) on an index of 100 endpoints filled to their bound.
func BenchmarkPrefixIndex(b *testing.B) {
	const endpoints, bound = 100, 8192
	keys := make([]endpoint.Key, endpoints)
	ix := prefixcache.NewIndex(bound, nil)
	next := uint64(1)
	fresh := func(hashes []uint64) {
		for i := range hashes {
			hashes[i] = next
			next++
		}
	}
	fill := make([]uint64, bound)
	for i := range keys {
		keys[i] = routingtest.Key(i)
		fresh(fill)
		ix.Add(keys[i], fill, prefixcache.Engine{})
	}
	for _, size := range promptSizes {
		blocks := size.bytes / (prefixcache.DefaultBlockSize * 4)
		hashes := make([]uint64, blocks)
		b.Run("add/prompt="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				fresh(hashes)
				ix.Add(keys[i%endpoints], hashes, prefixcache.Engine{})
				i++
			}
		})
		b.Run("match/prompt="+size.name, func(b *testing.B) {
			fresh(hashes)
			ix.Add(keys[0], hashes, prefixcache.Engine{})
			b.ReportAllocs()
			for b.Loop() {
				if n := ix.Match(keys[0], hashes, 0); n != blocks {
					b.Fatalf("matched %d blocks, want %d", n, blocks)
				}
			}
		})
	}
}

// benchRouters runs decide over fleets of 10 to 10000 endpoints, serially and from
// parallel goroutines. Each endpoint has been sent a distinct 4 KB prompt and every
// tenth one also the decided prompt, so a tenth of the candidates match it entirely.
// decide gets a scores buffer of its own goroutine.
func benchRouters(b *testing.B, decide func(r *prefixcache.Router, rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error) {
	const promptBytes = 4 << 10
	for _, n := range []int{10, 100, 1000, 10000} {
		fleet := routingtest.NewFleet("llama", n)
		r := prefixcache.New(prefixcache.Config{Pods: fleet.Cache}, routingtest.SeededRandom(1))
		prompt := benchPrompt(-1, promptBytes)
		for i := range n {
			r.Learn(fleet.Context(routing.Request{Prompt: benchPrompt(i, promptBytes)}), fleet.Pod(i))
			if i%10 == 0 {
				r.Learn(fleet.Context(routing.Request{Prompt: prompt}), fleet.Pod(i))
			}
		}
		rc := fleet.Context(routing.Request{Prompt: prompt})
		cands := routingtest.Candidates(rc)
		name := fmt.Sprintf("endpoints=%d", n)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			scores := make([]float64, n)
			for b.Loop() {
				if err := decide(r, rc, cands, scores); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				scores := make([]float64, n)
				for pb.Next() {
					if err := decide(r, rc, cands, scores); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkScore(b *testing.B) {
	benchRouters(b, func(r *prefixcache.Router, rc *routing.RoutingContext, cands []routing.Candidate, scores []float64) error {
		return r.Score(rc, cands, scores)
	})
}

func BenchmarkPick(b *testing.B) {
	benchRouters(b, func(r *prefixcache.Router, rc *routing.RoutingContext, cands []routing.Candidate, _ []float64) error {
		_, err := r.Pick(rc, cands)
		return err
	})
}

// BenchmarkIndexMemory reports the heap an index holding 2^20 blocks (16 endpoints at
// the default bound) takes per block.
func BenchmarkIndexMemory(b *testing.B) {
	const endpoints, chunk = 16, 64
	blocks := endpoints * prefixcache.DefaultMaxBlocksPerEndpoint
	hashes := make([]uint64, chunk)
	var perBlock float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ix := prefixcache.NewIndex(prefixcache.DefaultMaxBlocksPerEndpoint, nil)
		next := uint64(1)
		for e := range endpoints {
			for range prefixcache.DefaultMaxBlocksPerEndpoint / chunk {
				for i := range hashes {
					hashes[i] = next
					next++
				}
				ix.Add(routingtest.Key(e), hashes, prefixcache.Engine{})
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if held := ix.Blocks(routingtest.Key(0)) * endpoints; held != blocks {
			b.Fatalf("index holds %d blocks, want %d", held, blocks)
		}
		perBlock = float64(after.HeapAlloc-before.HeapAlloc) / float64(blocks)
	}
	b.ReportMetric(perBlock, "bytes/block")
}

// BenchmarkRoute measures one whole decision of a prefix-cache router, from the request's
// RoutingContext to its learnt and released target, on 10 endpoints that each hold a
// distinct prompt, for prompts of growing size: the prompt's hashing is a share of it
// that grows with the prompt.
func BenchmarkRoute(b *testing.B) {
	fleet := routingtest.NewFleet("llama", 10)
	for _, size := range promptSizes {
		r := prefixcache.New(prefixcache.Config{Pods: fleet.Cache}, routingtest.SeededRandom(1))
		router := routing.NewRouter(r, routingtest.Options())
		for i := range 10 {
			r.Learn(fleet.Context(routing.Request{Prompt: benchPrompt(i, size.bytes)}), fleet.Pod(i))
		}
		req := routing.Request{Prompt: benchPrompt(3, size.bytes), PromptTokens: int64(size.bytes / 4)}
		b.Run("prompt="+size.name, func(b *testing.B) {
			b.ReportAllocs()
			var rc routing.RoutingContext
			for b.Loop() {
				fleet.InitContext(&rc, req)
				routingtest.Route(b, router, &rc).Release(1)
			}
		})
	}
}
