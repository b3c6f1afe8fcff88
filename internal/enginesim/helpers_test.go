package enginesim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
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

// request is a request body with its content type.
type request struct {
	contentType string
	body        []byte
}

// toRequest is v itself when it is a request, a JSON body holding v when it is a string,
// and v marshalled as JSON otherwise.
func toRequest(t *testing.T, v any) request {
	t.Helper()
	switch v := v.(type) {
	case request:
		return v
	case string:
		return request{"application/json", []byte(v)}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return request{"application/json", b}
}

// formBody is a multipart/form-data body with the given fields and, unless file is nil,
// a file part holding file.
func formBody(t *testing.T, fields map[string]string, file []byte) request {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if file != nil {
		fw, err := mw.CreateFormFile("file", "audio.wav")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fw.Write(file)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return request{mw.FormDataContentType(), b.Bytes()}
}

// send posts a request body and returns the status and body.
func (te *testEngine) send(t *testing.T, path string, req request) (int, string) {
	t.Helper()
	resp, err := te.srv.Client().Post(te.srv.URL+path, req.contentType, bytes.NewReader(req.body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// post sends a body as [toRequest] makes it and returns the status and body.
func (te *testEngine) post(t *testing.T, path string, body any) (int, string) {
	t.Helper()
	return te.send(t, path, toRequest(t, body))
}

// decode parses a JSON answer.
func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

// apiCase is one request to an endpoint and the answer it must get.
type apiCase struct {
	name   string
	path   string
	body   any
	status int
	// contains must appear in the answer's body.
	contains string
	// check, if set, inspects a successful answer's body.
	check func(t *testing.T, body string)
}

// runAPICases sends each case to te as a subtest.
func runAPICases(t *testing.T, te *testEngine, cases []apiCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := te.post(t, c.path, c.body)
			if status != c.status || !strings.Contains(body, c.contains) {
				t.Fatalf("got %d %s, want %d containing %q", status, body, c.status, c.contains)
			}
			if c.check != nil {
				c.check(t, body)
			}
		})
	}
}

// metrics scrapes and parses /metrics as the scrapers do: the text format, uncompressed,
// which the engine serves from its cached page.
func (te *testEngine) metrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	return te.metricsWith(t, true)
}

// metricsWith scrapes and parses /metrics, accepting compression unless uncompressed,
// which then takes promhttp's negotiation.
func (te *testEngine) metricsWith(t *testing.T, uncompressed bool) map[string]*dto.MetricFamily {
	t.Helper()
	transport := te.srv.Client().Transport.(*http.Transport).Clone()
	transport.DisableCompression = uncompressed
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Get(te.srv.URL + "/metrics")
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

// label returns a label's value on a family's first series, "" while the family has no
// series (an info gauge the engine sets anew between two scrapes).
func label(fams map[string]*dto.MetricFamily, name, key string) string {
	series := fams[name].GetMetric()
	if len(series) == 0 {
		return ""
	}
	for _, l := range series[0].GetLabel() {
		if l.GetName() == key {
			return l.GetValue()
		}
	}
	return ""
}

// histogram returns the count and sum of a histogram family's first series.
func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string) (count uint64, sum float64) {
	t.Helper()
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) == 0 || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("histogram %s missing", name)
	}
	h := f.GetMetric()[0].GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// phases are the request-phase histograms of one scrape, each as its count and sum.
type phases struct {
	e2e, ttft, queue, prefill, decode, inference struct {
		count uint64
		sum   float64
	}
}

// requestPhases reads the request-phase histograms.
func requestPhases(t *testing.T, fams map[string]*dto.MetricFamily) phases {
	t.Helper()
	var p phases
	p.e2e.count, p.e2e.sum = histogram(t, fams, "vllm:e2e_request_latency_seconds")
	p.ttft.count, p.ttft.sum = histogram(t, fams, "vllm:time_to_first_token_seconds")
	p.queue.count, p.queue.sum = histogram(t, fams, "vllm:request_queue_time_seconds")
	p.prefill.count, p.prefill.sum = histogram(t, fams, "vllm:request_prefill_time_seconds")
	p.decode.count, p.decode.sum = histogram(t, fams, "vllm:request_decode_time_seconds")
	p.inference.count, p.inference.sum = histogram(t, fams, "vllm:request_inference_time_seconds")
	return p
}

// checkPhaseInvariants checks what holds by construction for finished requests: each
// phase histogram observed every request, inference is prefill plus decode, and the
// end-to-end latency covers queueing and inference.
func checkPhaseInvariants(t *testing.T, p phases, requests uint64) {
	t.Helper()
	for name, n := range map[string]uint64{
		"e2e": p.e2e.count, "queue": p.queue.count, "prefill": p.prefill.count,
		"decode": p.decode.count, "inference": p.inference.count,
	} {
		if n != requests {
			t.Errorf("%s observed %d requests, want %d", name, n, requests)
		}
	}
	if d := p.inference.sum - (p.prefill.sum + p.decode.sum); d > 1e-6 || d < -1e-6 {
		t.Errorf("inference %vs is not prefill %vs + decode %vs", p.inference.sum, p.prefill.sum, p.decode.sum)
	}
	if p.e2e.sum < p.queue.sum+p.inference.sum {
		t.Errorf("e2e %vs is less than queue %vs + inference %vs", p.e2e.sum, p.queue.sum, p.inference.sum)
	}
}
