package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestServesIndependentInstances(t *testing.T) {
	a, b := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- run(ctx, []string{"--listen", a + "," + b, "--time-scale", "0.01", "--lora-load-time", "1ms"}, slog.New(slog.DiscardHandler))
	}()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func(addr, path, body string) int {
		resp, err := client.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get("http://" + b + "/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("engines did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := post(a, "/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/x"}`); got != http.StatusOK {
		t.Fatalf("load on a: %d", got)
	}
	if got := post(a, "/v1/completions", `{"model":"x","prompt":"hi","max_tokens":1}`); got != http.StatusOK {
		t.Fatalf("adapter on a: %d", got)
	}
	if got := post(b, "/v1/completions", `{"model":"x","prompt":"hi","max_tokens":1}`); got != http.StatusNotFound {
		t.Fatalf("adapter leaked to b: %d", got)
	}
	client.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
