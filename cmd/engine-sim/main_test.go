package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
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

// startSim runs engine-sim with args until the test ends, once the last of addrs answers.
func startSim(t *testing.T, addrs []string, args ...string) *http.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- run(ctx, append([]string{"--listen", strings.Join(addrs, ",")}, args...), slog.New(slog.DiscardHandler))
	}()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get("http://" + addrs[len(addrs)-1] + "/health")
		if err == nil {
			resp.Body.Close()
			return client
		}
		if time.Now().After(deadline) {
			t.Fatal("engines did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServesIndependentInstances(t *testing.T) {
	a, b := freeAddr(t), freeAddr(t)
	client := startSim(t, []string{a, b}, "--time-scale", "0.01", "--lora-load-time", "1ms")
	post := func(addr, path, body string) int {
		resp, err := client.Post("http://"+addr+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
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
}

func TestLoRAModulesFlag(t *testing.T) {
	addr := freeAddr(t)
	client := startSim(t, []string{addr}, "--lora-modules", "sql=/a/sql,chat=/a/chat", "--lora-modules", "code=/a/code")
	resp, err := client.Get("http://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct {
			ID     string `json:"id"`
			Parent string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range models.Data[1:] {
		got = append(got, m.ID+"<"+m.Parent)
	}
	if want := []string{"chat<llama-3-8b", "code<llama-3-8b", "sql<llama-3-8b"}; !slices.Equal(got, want) {
		t.Fatalf("adapters %v, want %v", got, want)
	}
}

func TestLoRAModulesFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--lora-modules", "sql"},
		{"--max-loras", "1", "--lora-modules", "a=/a,b=/b"},
	} {
		if err := run(context.Background(), append(args, "--listen", freeAddr(t)), slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("run(%v) succeeded, want an error", args)
		}
	}
}
