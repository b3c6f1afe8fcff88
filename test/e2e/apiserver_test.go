package e2e

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// apiServerRestart: the kube-apiserver goes away for a few seconds under traffic. The
// gateway keeps serving from its cache without a single failed request, and once the API
// server is back it catches up with a change made after the restart.
func apiServerRestart() {
	var served, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		c := sys.client("")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := ask(c, model, "Are you still there?", 4); err != nil {
				failed.Add(1)
				logf("request during the API server restart failed: %v", err)
			} else {
				served.Add(1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	before := served.Load()
	sys.cluster.RestartAPIServer(GinkgoTB(), time.Second)
	close(stop)
	wg.Wait()
	Expect(failed.Load()).To(BeZero(), "requests failed while the API server restarted")
	Expect(served.Load()).To(BeNumerically(">", before), "no request was served during the restart")

	// A route created after the restart, naming a policy that does not exist, answers
	// 500 once the gateway's informers have caught up.
	sys.cluster.Create(GinkgoTB(), httpRoute("after-restart", "after-restart", "missing-after-restart"))
	Eventually(func(g Gomega) {
		_, err := ask(sys.client("after-restart"), model, "hello", 4)
		e := apiError(err)
		g.Expect(e).NotTo(BeNil())
		g.Expect(e.StatusCode).To(Equal(http.StatusInternalServerError))
	}).Should(Succeed())
}
