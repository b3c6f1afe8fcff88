package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFloorProxyRelays checks that the go-net-http proxy sends the request, body and
// headers included, to the engine and relays the engine's answer, status included.
func TestFloorProxyRelays(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("X-Client")+" "+string(body))
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, "answer")
	}))
	defer engine.Close()
	proxy := httptest.NewServer(floorProxyHandler(strings.TrimPrefix(engine.URL, "http://")))
	defer proxy.Close()

	req, err := http.NewRequest(http.MethodPost, proxy.URL+"/v1/chat/completions?x=1", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Client", "c")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `POST /v1/chat/completions?x=1 c {"model":"m"}`; resp.Header.Get("X-Seen") != want {
		t.Errorf("the engine saw %q, want %q", resp.Header.Get("X-Seen"), want)
	}
	if resp.StatusCode != http.StatusTeapot || string(body) != "answer" {
		t.Errorf("answer %d %q, want %d %q", resp.StatusCode, body, http.StatusTeapot, "answer")
	}
}
