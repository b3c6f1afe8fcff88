package metadata_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/metadata"
)

// TestServerDrainsOnStop checks that stopping the server lets a request in flight finish
// and that Start then returns without error.
func TestServerDrainsOnStop(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := metadata.NewServer(h, metadata.ServerOptions{Listener: ln})
	if srv.NeedLeaderElection() {
		t.Error("the metadata API must serve on every replica, not only the leader")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- srv.Start(ctx) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	type result struct {
		body string
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := client.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- result{string(b), err}
	}()
	<-entered
	cancel()
	// Shutdown closes the listener first; release the request only once it has.
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server still accepts connections after its context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	if r := <-got; r.err != nil || r.body != "done" {
		t.Errorf("in-flight request = %q, %v; want done, nil", r.body, r.err)
	}
	if err := <-started; err != nil {
		t.Errorf("Start = %v, want nil", err)
	}
}
