package cache

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/enginesim"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestParseMetrics(t *testing.T) {
	at := time.Unix(1764840012, 0)
	tests := []struct {
		file   string
		engine endpoint.Engine
		want   endpoint.Metrics
	}{
		{
			file: "vllm.txt", engine: endpoint.EngineVLLM,
			want: endpoint.Metrics{
				Running: 7, Waiting: 3, KVCacheUsage: 0.4375,
				PrefixCacheQueries: 184320, PrefixCacheHits: 122880, PrefixCacheHitRate: 122880.0 / 184320,
				LoRA: endpoint.LoRAState{
					Running: []string{"llama-3-8b-sql-lora", "llama-3-8b-chat-lora"},
					Waiting: []string{"llama-3-8b-sql-lora"},
					MaxLoRA: 4,
				},
				BlockSize: 16, NumGPUBlocks: 27910,
				TTFT:          endpoint.Histogram{Count: 412, Sum: 61.8},
				TPOT:          endpoint.Histogram{Count: 96100, Sum: 2883},
				E2E:           endpoint.Histogram{Count: 412, Sum: 1236},
				QueueTime:     endpoint.Histogram{Count: 412, Sum: 43.26},
				PrefillTime:   endpoint.Histogram{Count: 412, Sum: 18.54},
				DecodeTime:    endpoint.Histogram{Count: 412, Sum: 1112.4},
				InferenceTime: endpoint.Histogram{Count: 412, Sum: 1130.94},
				PromptTokens:  251904, GenerationTokens: 96512,
				ScrapedAt: at,
			},
		},
		{
			// vllm.txt with a second data-parallel engine of twice the load: series are
			// summed, ratios averaged.
			file: "vllm_dp2.txt", engine: endpoint.EngineVLLM,
			want: endpoint.Metrics{
				Running: 21, Waiting: 9, KVCacheUsage: 0.65625,
				PrefixCacheQueries: 552960, PrefixCacheHits: 368640, PrefixCacheHitRate: 122880.0 / 184320,
				LoRA: endpoint.LoRAState{
					Running: []string{"llama-3-8b-sql-lora", "llama-3-8b-chat-lora"},
					Waiting: []string{"llama-3-8b-sql-lora"},
					MaxLoRA: 4,
				},
				BlockSize: 16, NumGPUBlocks: 27910,
				TTFT:          endpoint.Histogram{Count: 1236, Sum: 185.4},
				TPOT:          endpoint.Histogram{Count: 288300, Sum: 8649},
				E2E:           endpoint.Histogram{Count: 1236, Sum: 3708},
				QueueTime:     endpoint.Histogram{Count: 1236, Sum: 129.78},
				PrefillTime:   endpoint.Histogram{Count: 1236, Sum: 55.62},
				DecodeTime:    endpoint.Histogram{Count: 1236, Sum: 3337.2},
				InferenceTime: endpoint.Histogram{Count: 1236, Sum: 3392.82},
				PromptTokens:  755712, GenerationTokens: 289536,
				ScrapedAt: at,
			},
		},
		{
			file: "vllm_legacy.txt", engine: endpoint.EngineVLLM,
			want: endpoint.Metrics{
				Running: 2, KVCacheUsage: 0.125,
				PrefixCacheQueries: 400, PrefixCacheHits: 100, PrefixCacheHitRate: 0.25,
				ScrapedAt: at,
			},
		},
		{
			file: "sglang.txt", engine: endpoint.EngineSGLang,
			want: endpoint.Metrics{
				Running: 5, Waiting: 4, KVCacheUsage: 0.62, PrefixCacheHitRate: 0.71,
				BlockSize: 1, NumGPUBlocks: 161721, // sglang:max_total_num_tokens
				TTFT:         endpoint.Histogram{Count: 350, Sum: 98},
				TPOT:         endpoint.Histogram{Count: 40650, Sum: 1016.25},
				E2E:          endpoint.Histogram{Count: 350, Sum: 1155},
				QueueTime:    endpoint.Histogram{Count: 350, Sum: 21.7},
				PromptTokens: 88000, GenerationTokens: 41000,
				ScrapedAt: at,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseMetrics(tt.engine, f, at)
			if err != nil {
				t.Fatalf("ParseMetrics: %v", err)
			}
			w := tt.want
			if !near(got.Running, w.Running) || !near(got.Waiting, w.Waiting) || !near(got.KVCacheUsage, w.KVCacheUsage) ||
				!near(got.PrefixCacheQueries, w.PrefixCacheQueries) || !near(got.PrefixCacheHits, w.PrefixCacheHits) ||
				!near(got.PrefixCacheHitRate, w.PrefixCacheHitRate) || !near(got.PromptTokens, w.PromptTokens) ||
				!near(got.GenerationTokens, w.GenerationTokens) || got.BlockSize != w.BlockSize ||
				got.NumGPUBlocks != w.NumGPUBlocks || !got.ScrapedAt.Equal(w.ScrapedAt) {
				t.Errorf("ParseMetrics =\n%+v\nwant\n%+v", got, w)
			}
			for _, h := range []struct {
				name      string
				got, want endpoint.Histogram
			}{
				{"TTFT", got.TTFT, w.TTFT}, {"TPOT", got.TPOT, w.TPOT}, {"E2E", got.E2E, w.E2E},
				{"QueueTime", got.QueueTime, w.QueueTime}, {"PrefillTime", got.PrefillTime, w.PrefillTime},
				{"DecodeTime", got.DecodeTime, w.DecodeTime}, {"InferenceTime", got.InferenceTime, w.InferenceTime},
			} {
				if h.got.Count != h.want.Count || !near(h.got.Sum, h.want.Sum) {
					t.Errorf("%s = %+v, want %+v", h.name, h.got, h.want)
				}
			}
			if !slices.Equal(got.LoRA.Running, w.LoRA.Running) || !slices.Equal(got.LoRA.Waiting, w.LoRA.Waiting) ||
				got.LoRA.MaxLoRA != w.LoRA.MaxLoRA {
				t.Errorf("LoRA = %+v, want %+v", got.LoRA, w.LoRA)
			}
		})
	}
}

// engineSimMetrics returns the /metrics text of an engine simulator that has served
// one completion.
func engineSimMetrics(t *testing.T) []byte {
	t.Helper()
	cfg := enginesim.DefaultConfig()
	cfg.TimeScale = 0.01
	engine, err := enginesim.NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := engine.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions",
		strings.NewReader(`{"model":"llama-3-8b","prompt":"time my phases","max_tokens":3}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("completion: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.Bytes()
}

func TestParseMetricsFromEngineSim(t *testing.T) {
	m, err := ParseMetrics(endpoint.EngineVLLM, bytes.NewReader(engineSimMetrics(t)), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]endpoint.Histogram{
		"TTFT": m.TTFT, "E2E": m.E2E, "QueueTime": m.QueueTime, "PrefillTime": m.PrefillTime,
		"DecodeTime": m.DecodeTime, "InferenceTime": m.InferenceTime,
	} {
		if h.Count != 1 {
			t.Errorf("%s = %+v, want one observation", name, h)
		}
	}
	if !near(m.InferenceTime.Sum, m.PrefillTime.Sum+m.DecodeTime.Sum) || m.DecodeTime.Sum <= 0 {
		t.Errorf("inference %v, prefill %v, decode %v: want inference = prefill + decode and some decode",
			m.InferenceTime.Sum, m.PrefillTime.Sum, m.DecodeTime.Sum)
	}
}

func TestParseMetricsLoRAInfo(t *testing.T) {
	const header = "# TYPE vllm:lora_requests_info gauge\n"
	series := func(running, waiting, maxLoRA string, at string) string {
		return fmt.Sprintf("vllm:lora_requests_info{max_lora=%q,running_lora_adapters=%q,waiting_lora_adapters=%q} %s\n",
			maxLoRA, running, waiting, at)
	}
	tests := []struct {
		name   string
		series []string
		want   endpoint.LoRAState
	}{
		{name: "no series"},
		{
			name:   "one series",
			series: []string{series("sql", "chat", "4", "1764840012")},
			want:   endpoint.LoRAState{Running: []string{"sql"}, Waiting: []string{"chat"}, MaxLoRA: 4},
		},
		{
			name:   "the newest series wins",
			series: []string{series("old", "", "4", "1764840011"), series("sql", "", "4", "1764840012.5"), series("older", "x", "8", "1764840010")},
			want:   endpoint.LoRAState{Running: []string{"sql"}, MaxLoRA: 4},
		},
		{
			name: "equal timestamps: unions of running and of waiting, largest max_lora",
			series: []string{
				series("", "", "4", "1764840012"),
				series("sql", "chat", "4", "1764840012"),
				series("chat,sql", "sql,math", "8", "1764840012"),
				series("stale", "stale", "16", "1764840011"),
			},
			want: endpoint.LoRAState{Running: []string{"sql", "chat"}, Waiting: []string{"chat", "sql", "math"}, MaxLoRA: 8},
		},
		{
			name:   "equal timestamps with max_lora unknown",
			series: []string{series("sql", "", "None", "1764840012"), series("", "chat", "2", "1764840012")},
			want:   endpoint.LoRAState{Running: []string{"sql"}, Waiting: []string{"chat"}, MaxLoRA: 2},
		},
		{
			name:   "a newer series with nothing running empties the state",
			series: []string{series("sql", "", "4", "1764840011"), series("", "", "4", "1764840012")},
			want:   endpoint.LoRAState{MaxLoRA: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := header + strings.Join(tt.series, "")
			got, err := ParseMetrics(endpoint.EngineVLLM, strings.NewReader(text), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.LoRA.Running, tt.want.Running) || !slices.Equal(got.LoRA.Waiting, tt.want.Waiting) ||
				got.LoRA.MaxLoRA != tt.want.MaxLoRA {
				t.Errorf("LoRA = %+v, want %+v", got.LoRA, tt.want)
			}
		})
	}
}

func TestParseMetricsErrors(t *testing.T) {
	if _, err := ParseMetrics("tgi", strings.NewReader(""), time.Now()); err == nil {
		t.Error("unknown engine: want error")
	}
	tests := map[string]string{
		"html page":                "<html><body>502 Bad Gateway</body></html>\n",
		"json":                     "{\"error\": \"unavailable\"}\n",
		"number first":             "12 vllm:num_requests_running\n",
		"nul byte":                 "\x00\n",
		"no final newline":         "vllm:num_requests_running 1",
		"malformed label set":      "vllm:num_requests_running{ 1\n",
		"unterminated label value": "vllm:num_requests_running{a=\"1} 1\n",
		"label without value":      "vllm:num_requests_running{a} 1\n",
		"no value":                 "vllm:num_requests_running{a=\"1\"}\n",
		"word value":               "vllm:num_requests_running seven\n",
		"hexadecimal value":        "vllm:num_requests_running 0x1p3\n",
		"fractional timestamp":     "vllm:num_requests_running 1 1.5\n",
		"text after timestamp":     "vllm:num_requests_running 1 2 3\n",
		"unknown type":             "# TYPE vllm:num_requests_running gauges\n",
		"second type":              "# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running counter\n",
		"type after samples":       "vllm:num_requests_running 1\n# TYPE vllm:num_requests_running gauge\n",
		"negative histogram count": "# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_count -1\n",
		"label set without name":   "{a=\"1\"} 1\n",
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseMetrics(endpoint.EngineVLLM, strings.NewReader(text), time.Now()); err == nil {
				t.Error("ParseMetrics: want error")
			}
			if _, err := parseMetricsExpfmt(endpoint.EngineVLLM, []byte(text), time.Now()); err == nil {
				t.Error("expfmt accepts the text: ParseMetrics must too")
			}
		})
	}
}

func TestParseMetricsSkipsMalformedLinesOfOtherFamilies(t *testing.T) {
	// expfmt rejects all of this text; ParseMetrics reads the lines it maps.
	text := "python_gc_objects_collected_total{generation=\"0\" 1\nvllm:num_preemptions_total seven\n" +
		"vllm:num_requests_running 3 \r\nvllm:num_requests_waiting 2\r\n"
	m, err := ParseMetrics(endpoint.EngineVLLM, strings.NewReader(text), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m.Running != 3 || m.Waiting != 2 {
		t.Errorf("Running, Waiting = %v, %v; want 3, 2", m.Running, m.Waiting)
	}
}

func TestParseMetricsResultsOutliveTheParse(t *testing.T) {
	parse := func(adapter string) endpoint.Metrics {
		text := fmt.Sprintf("vllm:lora_requests_info{running_lora_adapters=%q} 1\n", adapter)
		m, err := ParseMetrics(endpoint.EngineVLLM, strings.NewReader(text), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := parse("sql")
	for range 3 {
		parse("xyz")
	}
	if !slices.Equal(first.LoRA.Running, []string{"sql"}) {
		t.Errorf("LoRA.Running = %q after later parses, want [sql]", first.LoRA.Running)
	}
}

func TestMetricNamesListsEveryField(t *testing.T) {
	if got, want := len(metricNames{}.lists()), reflect.TypeFor[metricNames]().NumField(); got != want {
		t.Errorf("metricNames.lists() returns %d lists, want one per field (%d)", got, want)
	}
}
