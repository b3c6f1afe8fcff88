//go:build unix

package inbound

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestStalledLargeBodiesCostLittleMemory is the attack from the review: many
// connections each declare a 16 MiB body and send none of it. The server must hold
// memory for the bytes received, not the bytes declared, and keep serving others.
func TestStalledLargeBodiesCostLittleMemory(t *testing.T) {
	eachServer(t, func(t *testing.T, startServer serverStarter) {
		const (
			stalled   = 500
			declared  = 16 << 20
			heapLimit = 100 << 20
		)
		ensureOpenFiles(t, 2*stalled+64) // both ends of every connection, plus slack
		ignore := goleak.IgnoreCurrent()

		l := Limits{MaxBodyBytes: declared}
		var entered atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.Add(1)
			body, err := ReadBody(w, r, l, nil)
			if err != nil {
				w.WriteHeader(StatusCode(err))
				return
			}
			w.Write(body)
		})
		srv := startServer(t, l, h)

		before := testenv.HeapInUse()
		conns := make([]net.Conn, 0, stalled)
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
			conns = nil
		}
		defer closeAll()
		request := fmt.Sprintf("POST / HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n", declared)
		for range stalled {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			conns = append(conns, c)
			if _, err := io.WriteString(c, request); err != nil {
				t.Fatalf("write headers: %v", err)
			}
		}

		// Every handler has entered ReadBody, allocated what it will and is parked
		// waiting for body bytes.
		waitUntil(t, func() bool {
			return entered.Load() == stalled && testenv.GoroutinesBlockedIn("inbound.ReadBody(") == stalled
		},
			func() string {
				return fmt.Sprintf("%d of %d handlers entered, %d parked in ReadBody", entered.Load(), stalled, testenv.GoroutinesBlockedIn("inbound.ReadBody("))
			})
		during := testenv.HeapInUse()
		t.Logf("heap in use: %.1f MiB before, %.1f MiB with %d connections each declaring a %d MiB body (%.1f KiB per connection)",
			testenv.MiB(before), testenv.MiB(during), stalled, declared>>20, float64(during-before)/stalled/1024)
		if during > heapLimit {
			t.Errorf("heap in use = %.1f MiB with %d stalled bodies, want under %d MiB", testenv.MiB(during), stalled, heapLimit>>20)
		}

		// The stalled connections do not stop anyone else being served.
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Post(srv.URL, "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatalf("request alongside the stalled ones: %v", err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(got) != `{"model":"m"}` {
			t.Errorf("request alongside the stalled ones = %d %q (%v), want 200 echoing the body", resp.StatusCode, got, err)
		}

		closeAll()
		tr.CloseIdleConnections()
		srv.Close() // waits for every handler to return
		goleak.VerifyNone(t, ignore)
	})
}

// ensureOpenFiles raises the soft open-file limit to at least n within the hard limit,
// or skips the test.
func ensureOpenFiles(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot read the open-file limit: %v", err)
	}
	if uint64(lim.Cur) >= n {
		return
	}
	if uint64(lim.Max) < n {
		t.Skipf("needs %d open files but the hard limit (ulimit -Hn) is %d", n, lim.Max)
	}
	raised := lim
	raised.Cur = raised.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		t.Skipf("needs %d open files but the limit is %d and cannot be raised: %v", n, lim.Cur, err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
}

// waitUntil polls cond until it holds, failing the test with progress() if it does
// not within clientWait.
func waitUntil(t *testing.T, cond func() bool, progress func() string) {
	t.Helper()
	for deadline := time.Now().Add(clientWait); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", progress())
		}
	}
}
