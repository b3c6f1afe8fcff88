package routetable

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// benchTable builds routes × rules: route i is "/m<i>", its rules distinguish
// /chat/completions (POST, with and without a header), /completions, /embeddings (exact)
// and a catch-all prefix, each with one backend and a policy.
func benchTable(tb testing.TB, routes, rules int) *Table {
	objs := []any{switchboardClass(), aGateway("gw").Listening(onHTTP("web", 80))}
	for i := range routes {
		rt := aRoute(fmt.Sprintf("route-%03d", i)).CreatedAt(time.Duration(i) * time.Second).AttachedTo("gw")
		for j := range rules {
			prefix := fmt.Sprintf("/m%d", i)
			r := aRule().To(service(fmt.Sprintf("engine-%d", i), 8000)).WithPolicy("p")
			switch j % 5 {
			case 0:
				r.PathPrefix(prefix+"/chat/completions").Method("POST").Header("x-tier", "gold")
			case 1:
				r.PathPrefix(prefix + "/chat/completions").Method("POST")
			case 2:
				r.PathPrefix(prefix + "/completions")
			case 3:
				r.Exact(prefix + "/embeddings")
			default:
				r.PathPrefix(prefix)
			}
			rt.With(r)
		}
		objs = append(objs, rt)
	}
	return build(tb, objs...)
}

func benchRequest(route, rule int) *http.Request {
	prefix := fmt.Sprintf("/m%d", route)
	switch rule % 5 {
	case 0:
		return request("POST http://gateway.example.com"+prefix+"/chat/completions", "x-tier: gold")
	case 1:
		return request("POST http://gateway.example.com" + prefix + "/chat/completions")
	case 2:
		return request("GET http://gateway.example.com" + prefix + "/completions")
	case 3:
		return request("GET http://gateway.example.com" + prefix + "/embeddings")
	default:
		return request("GET http://gateway.example.com" + prefix + "/models")
	}
}

// BenchmarkMatch matches against 100 routes × 5 rules (500 rules on one listener).
func BenchmarkMatch(b *testing.B) {
	tbl := benchTable(b, 100, 5)
	for _, c := range []struct {
		name        string
		route, rule int
	}{{"first", 0, 0}, {"middle", 50, 2}, {"last", 99, 4}} {
		r := benchRequest(c.route, c.rule)
		want := fmt.Sprintf("default/route-%03d#%d", c.route, c.rule)
		if got := served(tbl, 80, r); got != want {
			b.Fatalf("served %s, want %s", got, want)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tbl.Match(Addr{IP: gatewayIP, Port: 80}, r)
			}
		})
	}
}

func BenchmarkBuild(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		benchTable(b, 100, 5)
	}
}
