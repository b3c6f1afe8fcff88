package enginesim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastConfig is a configuration whose delays are short enough for tests.
func fastConfig() Config {
	cfg := DefaultConfig()
	cfg.TimeScale = 0.01
	cfg.LoRALoadTime = 10 * time.Millisecond
	cfg.DefaultMaxTokens = 4
	return cfg
}

// testEngine is an engine served on a loopback httptest server.
type testEngine struct {
	engine *Engine
	srv    *httptest.Server
	client openai.Client
}

func startEngine(t *testing.T, cfg Config) *testEngine {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	client := openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1"),
		option.WithAPIKey(cmp.Or(cfg.APIKey, "unused")),
		option.WithMaxRetries(0),
		option.WithHTTPClient(srv.Client()),
	)
	return &testEngine{engine: e, srv: srv, client: client}
}

// post sends a JSON body and returns the status and body.
func (te *testEngine) post(t *testing.T, path string, body any) (int, string) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := te.srv.Client().Post(te.srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// metrics scrapes and parses /metrics.
func (te *testEngine) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := te.srv.Client().Get(te.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of a family's first series (counter, gauge or histogram count).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) == 0 {
		t.Fatalf("metric %s missing", name)
	}
	m := f.GetMetric()[0]
	switch f.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("metric %s has unexpected type %v", name, f.GetType())
	return 0
}

// label returns a label's value on a family's first series.
func label(fams map[string]*dto.MetricFamily, name, key string) string {
	for _, l := range fams[name].GetMetric()[0].GetLabel() {
		if l.GetName() == key {
			return l.GetValue()
		}
	}
	return ""
}
