package engineclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startEngine serves an in-process engine simulator until the test ends and returns its
// base URL.
func startEngine(t *testing.T, mutate func(*enginesim.Config)) string {
	t.Helper()
	cfg := enginesim.DefaultConfig()
	cfg.Model = "base"
	cfg.LoRALoadTime = 0
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := enginesim.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		srv.Client().CloseIdleConnections()
	})
	return srv.URL
}

// newClient returns a Client whose idle connections are closed when the test ends.
func newClient(t *testing.T) *Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return New(&http.Client{Transport: tr})
}

func TestLoadListUnload(t *testing.T) {
	ctx := context.Background()
	url := startEngine(t, nil)
	c := newClient(t)

	ids, err := c.Models(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"base"}) {
		t.Fatalf("Models before load = %v, want [base]", ids)
	}
	if err := c.LoadAdapter(ctx, url, "", "sql", "/adapters/sql"); err != nil {
		t.Fatalf("LoadAdapter: %v", err)
	}
	if ids, _ = c.Models(ctx, url, ""); !slices.Equal(ids, []string{"base", "sql"}) {
		t.Fatalf("Models after load = %v, want [base sql]", ids)
	}
	err = c.LoadAdapter(ctx, url, "", "sql", "/adapters/sql")
	if !errors.Is(err, ErrAlreadyLoaded) || errors.Is(err, ErrMaxAdapters) {
		t.Fatalf("second LoadAdapter = %v, want ErrAlreadyLoaded only", err)
	}
	if err := c.UnloadAdapter(ctx, url, "", "sql"); err != nil {
		t.Fatalf("UnloadAdapter: %v", err)
	}
	if ids, _ = c.Models(ctx, url, ""); !slices.Equal(ids, []string{"base"}) {
		t.Fatalf("Models after unload = %v, want [base]", ids)
	}
	if err := c.UnloadAdapter(ctx, url, "", "sql"); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("second UnloadAdapter = %v, want ErrNotLoaded", err)
	}
}

func TestMaxAdapters(t *testing.T) {
	ctx := context.Background()
	url := startEngine(t, func(c *enginesim.Config) { c.MaxLoRAs = 1 })
	c := newClient(t)
	if err := c.LoadAdapter(ctx, url, "", "a", "/a"); err != nil {
		t.Fatal(err)
	}
	err := c.LoadAdapter(ctx, url, "", "b", "/b")
	if !errors.Is(err, ErrMaxAdapters) {
		t.Fatalf("LoadAdapter beyond max-loras = %v, want ErrMaxAdapters", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || e.Op != "load adapter" {
		t.Fatalf("error = %#v, want a 400 *Error of load adapter", err)
	}
	if errors.Is(err, ErrAlreadyLoaded) || errors.Is(err, ErrUnauthorized) {
		t.Fatalf("max-adapters error also matches another class: %v", err)
	}
}

func TestAPIKey(t *testing.T) {
	ctx := context.Background()
	url := startEngine(t, func(c *enginesim.Config) { c.APIKey = "secret" })
	c := newClient(t)
	if _, err := c.Models(ctx, url, ""); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("Models without key = %v, want ErrUnauthorized", err)
	}
	if err := c.LoadAdapter(ctx, url, "wrong", "a", "/a"); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("LoadAdapter with wrong key = %v, want ErrUnauthorized", err)
	}
	if err := c.LoadAdapter(ctx, url, "secret", "a", "/a"); err != nil {
		t.Fatalf("LoadAdapter with key: %v", err)
	}
	ids, err := c.Models(ctx, url, "secret")
	if err != nil || !slices.Equal(ids, []string{"base", "a"}) {
		t.Fatalf("Models with key = %v, %v; want [base a]", ids, err)
	}
}

func TestUnreachableAndMalformed(t *testing.T) {
	ctx := context.Background()
	c := newClient(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = w.Write([]byte("not json"))
			return
		}
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	url := srv.URL
	if _, err := c.Models(ctx, url, ""); err == nil {
		t.Error("Models with a malformed body succeeded")
	}
	err := c.LoadAdapter(ctx, url, "", "a", "/a")
	var e *Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusInternalServerError || e.Message != "boom" {
		t.Errorf("LoadAdapter on a failing server = %#v, want a 500 *Error with message boom", err)
	}
	for _, target := range []error{ErrMaxAdapters, ErrAlreadyLoaded, ErrNotLoaded, ErrUnauthorized} {
		if errors.Is(err, target) {
			t.Errorf("a 500 matches %v", target)
		}
	}
	srv.Close()
	if _, err := c.Models(ctx, url, ""); err == nil {
		t.Error("Models on a closed server succeeded")
	}
}

func TestNewError(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"openai", `{"error":{"message":"m","type":"T","code":400}}`, "m"},
		{"string", `{"error":"Unauthorized"}`, "Unauthorized"},
		{"detail", `{"detail":"d"}`, "d"},
		{"text", "plain\n", "plain"},
		{"empty", "", "Bad Request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newError("op", "u", 400, []byte(tt.body)).Message; got != tt.want {
				t.Errorf("Message = %q, want %q", got, tt.want)
			}
		})
	}
}
