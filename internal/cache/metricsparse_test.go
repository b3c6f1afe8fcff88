package cache

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchboard-llm/switchboard/internal/endpoint"
)

// parseMetricsExpfmt is the reference for ParseMetrics: the same mapping over the
// families expfmt.TextParser reads from the whole text. A panic in the parser (it has
// a few on malformed input) is returned as an error.
func parseMetricsExpfmt(engine endpoint.Engine, text []byte, scrapedAt time.Time) (m endpoint.Metrics, err error) {
	names, ok := engineMetricNames[engine]
	if !ok {
		return endpoint.Metrics{}, fmt.Errorf("unknown engine %q", engine)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("expfmt panicked: %v", r)
		}
	}()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return endpoint.Metrics{}, err
	}
	find := func(candidates []string) *dto.MetricFamily {
		for _, n := range candidates {
			if f, ok := families[n]; ok {
				return f
			}
		}
		return nil
	}
	m = endpoint.Metrics{
		Running:            refSum(find(names.running)),
		Waiting:            refSum(find(names.waiting)),
		KVCacheUsage:       refMean(find(names.kvCacheUsage)),
		PrefixCacheQueries: refSum(find(names.prefixQueries)),
		PrefixCacheHits:    refSum(find(names.prefixHits)),
		PrefixCacheHitRate: refMean(find(names.prefixHitRate)),
		TTFT:               refHistogram(find(names.ttft)),
		TPOT:               refHistogram(find(names.tpot)),
		E2E:                refHistogram(find(names.e2e)),
		QueueTime:          refHistogram(find(names.queue)),
		PrefillTime:        refHistogram(find(names.prefill)),
		DecodeTime:         refHistogram(find(names.decode)),
		InferenceTime:      refHistogram(find(names.inference)),
		PromptTokens:       refSum(find(names.promptTokens)),
		GenerationTokens:   refSum(find(names.generationTokens)),
		ScrapedAt:          scrapedAt,
	}
	if m.PrefixCacheHitRate == 0 && m.PrefixCacheQueries > 0 {
		m.PrefixCacheHitRate = m.PrefixCacheHits / m.PrefixCacheQueries
	}
	m.LoRA = refLoRAState(find(names.loraInfo))
	if labels := refLatestInfo(find(names.cacheConfig)); labels != nil {
		m.BlockSize = refAtoi(labels["block_size"])
		m.NumGPUBlocks = refAtoi(labels["num_gpu_blocks"])
	}
	if f := find(names.kvTokens); f != nil && m.NumGPUBlocks == 0 {
		m.BlockSize, m.NumGPUBlocks = 1, int(refSum(f))
	}
	return m, nil
}

func refValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

func refSum(f *dto.MetricFamily) float64 {
	var total float64
	for _, m := range f.GetMetric() {
		total += refValue(m)
	}
	return total
}

func refMean(f *dto.MetricFamily) float64 {
	if len(f.GetMetric()) == 0 {
		return 0
	}
	return refSum(f) / float64(len(f.GetMetric()))
}

func refHistogram(f *dto.MetricFamily) endpoint.Histogram {
	var h endpoint.Histogram
	for _, m := range f.GetMetric() {
		h.Count += m.GetHistogram().GetSampleCount()
		h.Sum += m.GetHistogram().GetSampleSum()
	}
	return h
}

func refLabels(m *dto.Metric) map[string]string {
	labels := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	return labels
}

func refLoRAState(f *dto.MetricFamily) endpoint.LoRAState {
	var (
		state  endpoint.LoRAState
		newest float64
		found  bool
	)
	for _, m := range f.GetMetric() {
		v := refValue(m)
		if found && v < newest {
			continue
		}
		if !found || v > newest {
			state, newest, found = endpoint.LoRAState{}, v, true
		}
		labels := refLabels(m)
		state.Running = refAppendNew(state.Running, refSplitList(labels["running_lora_adapters"]))
		state.Waiting = refAppendNew(state.Waiting, refSplitList(labels["waiting_lora_adapters"]))
		state.MaxLoRA = max(state.MaxLoRA, refAtoi(labels["max_lora"]))
	}
	return state
}

func refAppendNew(list, items []string) []string {
	for _, item := range items {
		if !slices.Contains(list, item) {
			list = append(list, item)
		}
	}
	return list
}

func refLatestInfo(f *dto.MetricFamily) map[string]string {
	var best *dto.Metric
	for _, m := range f.GetMetric() {
		if best == nil || refValue(m) > refValue(best) {
			best = m
		}
	}
	if best == nil {
		return nil
	}
	return refLabels(best)
}

func refSplitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func refAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// sameMetrics reports whether a and b are identical, NaNs and signed zeros included.
func sameMetrics(a, b endpoint.Metrics) bool {
	return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}

// engines are the engines whose mappings the equivalence tests check.
var engines = []endpoint.Engine{endpoint.EngineVLLM, endpoint.EngineSGLang}

// edgeCases are texts expfmt accepts that exercise the rules ParseMetrics shares with
// it; the equivalence test and the fuzz seed corpus use them.
var edgeCases = map[string]string{
	"empty":        "",
	"blank lines":  "\n  \n\t\nvllm:num_requests_running 1\n\n",
	"no last line": "vllm:num_requests_running 1\n   ",
	"comments": "#\n# plain comment\n#HELP vllm:num_requests_running h\n  # TYPE vllm:num_requests_running gauge\n" +
		"# TYPE\n# HELP vllm:num_requests_waiting\nvllm:num_requests_running 2\n",
	"values": "vllm:num_requests_running{engine=\"0\"} 1.5e+01\nvllm:num_requests_running{engine=\"1\"} -2E-1\n" +
		"vllm:num_requests_waiting NaN\nvllm:prompt_tokens_total +Inf\nvllm:generation_tokens_total -inf\n" +
		"vllm:prefix_cache_queries_total 1e-320\nvllm:prefix_cache_hits_total -0\n",
	"timestamps and blanks": "  vllm:num_requests_running { engine = \"0\" , } \t 3 1764840012000\n" +
		"vllm:num_requests_running{engine=\"1\"}4 -5\nvllm:num_requests_waiting-3\nvllm:kv_cache_usage_perc{}.5\n",
	"ratios averaged": "vllm:kv_cache_usage_perc{engine=\"0\"} 0.25\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n" +
		"vllm:kv_cache_usage_perc{engine=\"2\"} 1\nvllm:kv_cache_usage_perc{engine=\"2\"} 1\n",
	"first present name wins": "vllm:gpu_cache_usage_perc 0.5\nvllm:kv_cache_usage_perc 0.25\n" +
		"vllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 5\n",
	"declared but empty families do not count": "# HELP vllm:kv_cache_usage_perc h\n# TYPE vllm:kv_cache_usage_perc gauge\n" +
		"vllm:gpu_cache_usage_perc 0.5\n# TYPE vllm:time_per_output_token_seconds histogram\n" +
		"# TYPE vllm:inter_token_latency_seconds histogram\nvllm:inter_token_latency_seconds_count 3\n",
	"quoted names": "\"vllm:num_requests_running\"{engine=\"0\"} 1\nvllm:num_requests_\"running\" 2\n" +
		"vllm:num_requests_running\"\" 4\n# TYPE \"vllm:num_requests_waiting\" gauge\n\"vllm:num_requests_waiting\"3\n" +
		"vllm:cache_config_info{\"block_size\"=\"32\",num_gpu_blocks=\"7\"} 1\n",
	"quoted name with a blank": "# HELP \"vllm:num_requests_running 5\"\nvllm:num_requests_running 5\n",
	"escaped label values": "vllm:lora_requests_info{running_lora_adapters=\"a\\\"b, c\\\\d ,\\n e\\n\",waiting_lora_adapters=\"x}y,{z\",max_lora=\"3\"} 1\n" +
		"vllm:num_requests_running{path=\"C:\\\\\",quote=\"\\\"\"} 1\n",
	"lora ties, NaN and None": "vllm:lora_requests_info{running_lora_adapters=\"a\",max_lora=\"None\"} NaN\n" +
		"vllm:lora_requests_info{running_lora_adapters=\"b\",waiting_lora_adapters=\"a\",max_lora=\"+2\"} 5\n" +
		"vllm:lora_requests_info{running_lora_adapters=\"c,a\",max_lora=\"-7\"} 5\n",
	"cache config": "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 2\n" +
		"vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"100\"} 2\n" +
		"vllm:cache_config_info{block_size=\"99999999999999999999\",num_gpu_blocks=\"5\"} 1\n",
	"histogram": "# TYPE vllm:e2e_request_latency_seconds histogram\n" +
		"vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\"} 2.0\n" +
		"vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 3.0\n" +
		"vllm:e2e_request_latency_seconds_count{engine=\"0\"} 3.0\nvllm:e2e_request_latency_seconds_sum{engine=\"0\"} 1.5\n" +
		"vllm:e2e_request_latency_seconds_created{engine=\"0\"} 1.7e9\n" +
		"vllm:e2e_request_latency_seconds_sum{engine=\"1\"} 0.25\nvllm:e2e_request_latency_seconds_count{engine=\"1\"} 1\n",
	"histogram series by label set": "# TYPE vllm:request_queue_time_seconds histogram\n" +
		"vllm:request_queue_time_seconds_count{a=\"1\",b=\"2\"} 4\nvllm:request_queue_time_seconds_count{b=\"2\",a=\"1\"} 5\n" +
		"vllm:request_queue_time_seconds_sum{ b = \"2\", \"a\"=\"1\" } 0.1\nvllm:request_queue_time_seconds_sum{a=\"1\",b=\"2\"} 0.2\n" +
		"vllm:request_queue_time_seconds_bucket{a=\"3\",le=\"1\"} 1\nvllm:request_queue_time_seconds_sum{a=\"3\"} 0.3\n" +
		"vllm:request_queue_time_seconds{a=\"4\"} 7\nvllm:request_queue_time_seconds_count{le=\"9\",a=\"4\"} 2\n",
	"histogram float counts": "# TYPE vllm:request_prefill_time_seconds histogram\n" +
		"vllm:request_prefill_time_seconds_count{a=\"1\"} 2.5\nvllm:request_prefill_time_seconds_count{a=\"1\"} 3\n" +
		"vllm:request_prefill_time_seconds_bucket{a=\"2\",le=\"1\"} 0.5\nvllm:request_prefill_time_seconds_count{a=\"2\"} 4\n" +
		"vllm:request_prefill_time_seconds_bucket{a=\"3\",le=\"NaN\"} 0.5\nvllm:request_prefill_time_seconds_count{a=\"3\"} 6\n" +
		"vllm:request_prefill_time_seconds_bucket{a=\"4\"} 0.5\nvllm:request_prefill_time_seconds_count{a=\"4\"} 8\n" +
		"vllm:request_prefill_time_seconds_count{a=\"5\"} NaN\nvllm:request_prefill_time_seconds_count{a=\"6\"} 1e30\n" +
		"vllm:request_prefill_time_seconds_count{a=\"7\"} 18446744073709551615\n",
	"later buckets that are no plain integers": "# TYPE vllm:request_inference_time_seconds histogram\n" +
		"vllm:request_inference_time_seconds_bucket{a=\"1\",le=\"1\"} 1\nvllm:request_inference_time_seconds_bucket{a=\"1\",le=\"2\"} 1.5\n" +
		"vllm:request_inference_time_seconds_count{a=\"1\"} 2\nvllm:request_inference_time_seconds_bucket{a=\"2\",le=\"1\"} 1\n" +
		"vllm:request_inference_time_seconds_bucket{a=\"2\",le=\"+Inf\"} 100000000000000000000\n" +
		"vllm:request_inference_time_seconds_count{a=\"2\"} 3\nvllm:request_inference_time_seconds_bucket{a=\"3\",le=\"1\"} 1\n" +
		"vllm:request_inference_time_seconds_bucket{a=\"3\",le=\"+Inf\"} 4.000\nvllm:request_inference_time_seconds_count{a=\"3\"} 4\n",
	"histogram without TYPE": "vllm:request_decode_time_seconds_count 3\nvllm:request_decode_time_seconds_sum 1\n",
	"suffix family created first": "# HELP vllm:time_to_first_token_seconds_count h\n" +
		"vllm:time_to_first_token_seconds_sum 9\n# TYPE vllm:time_to_first_token_seconds histogram\n" +
		"vllm:time_to_first_token_seconds_count 3\nvllm:time_to_first_token_seconds_sum 2\n",
	"summary and histogram types on other names": "# TYPE vllm:time_per_output_token_seconds summary\n" +
		"vllm:time_per_output_token_seconds_count 3\nvllm:time_per_output_token_seconds{quantile=\"0.5\"} 1\n" +
		"vllm:inter_token_latency_seconds_count 5\n# TYPE vllm:kv_cache_usage_perc histogram\n" +
		"vllm:kv_cache_usage_perc_count 3\nvllm:gpu_cache_usage_perc 0.5\n# TYPE vllm:num_requests_running summary\n" +
		"vllm:num_requests_running_sum 4\nvllm:num_requests_running_bucket 5\n# TYPE vllm:lora_requests_info gaugehistogram\n" +
		"vllm:lora_requests_info_count{running_lora_adapters=\"a\"} 9\nvllm:lora_requests_info{le=\"1\",running_lora_adapters=\"b\"} 9\n" +
		"vllm:lora_requests_info_sum{running_lora_adapters=\"a\"} 9\n# TYPE vllm:cache_config_info Summary\n" +
		"vllm:cache_config_info{block_size=\"8\",quantile=\"1\"} 3\nvllm:cache_config_info{block_size=\"4\"} 9\n",
	"type spellings": "# TYPE vllm:num_requests_running COUNTER\n# TYPE vllm:num_requests_waiting Untyped\n" +
		"# TYPE vllm:e2e_request_latency_seconds hiſtogram\n# TYPE vllm:request_queue_time_seconds GAUGE_HISTOGRAM\n" +
		"vllm:num_requests_running 1\nvllm:num_requests_waiting 2\nvllm:e2e_request_latency_seconds_count 3\n" +
		"vllm:request_queue_time_seconds_count 4\n",
	"other families skipped": "python_gc{generation=\"0\"} 1\nprocess_start_time_seconds 1.7e9\n" +
		"vllm:num_requests_running_total 7\nvllm:num_requests_runnin 8\nvllm:num_requests_running 1\n" +
		"sglang:num_running_reqs 5\n",
	"sglang": "# TYPE sglang:time_to_first_token_seconds histogram\nsglang:time_to_first_token_seconds_count 3\n" +
		"sglang:time_to_first_token_seconds_sum 1.5\nsglang:cache_hit_rate 0.5\nsglang:cache_hit_rate 0\n" +
		"sglang:num_running_reqs{tp_rank=\"0\"} 2\nsglang:num_running_reqs{tp_rank=\"1\"} 3\n",
	"braced name": "{\"vllm:num_requests_running\",engine=\"0\"} 1\n{engine=\"1\", \"vllm:num_requests_running\"} 2\n",
}

func TestParseMetricsMatchesExpfmt(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string][]byte{}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		texts[filepath.Base(file)] = text
	}
	texts["engine simulator"] = engineSimMetrics(t)
	for name, text := range edgeCases {
		texts[name] = []byte(text)
	}
	at := time.Unix(1764840012, 0)
	for name, text := range texts {
		for _, engine := range engines {
			t.Run(string(engine)+"/"+name, func(t *testing.T) {
				t.Parallel()
				want, err := parseMetricsExpfmt(engine, text, at)
				if err != nil {
					t.Fatalf("expfmt rejects the text: %v", err)
				}
				got, err := ParseMetrics(engine, bytes.NewReader(text), at)
				if err != nil {
					t.Fatalf("ParseMetrics: %v", err)
				}
				if !sameMetrics(got, want) {
					t.Errorf("ParseMetrics =\n%+v\nexpfmt mapping =\n%+v", got, want)
				}
			})
		}
	}
}

// FuzzParseMetricsMatchesExpfmt checks that ParseMetrics agrees with the expfmt-based
// reference on every text expfmt accepts, and never panics. Texts with a line that
// opens with '{' (the metric name inside the label set) are not compared: expfmt reads
// such a line with state left over from the line before (a set without a name adds to
// the previous family; the labels read before the name follow the previous family's
// type), where ParseMetrics reads each line on its own.
func FuzzParseMetricsMatchesExpfmt(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		// Seed with the fixtures in pieces of a few dozen lines: minimising a whole
		// fixture (vllm.txt is 27 KB) would take most of a short fuzzing run.
		lines := bytes.SplitAfter(text, []byte("\n"))
		for i := 0; i < len(lines); i += 40 {
			f.Add(bytes.Join(lines[i:min(i+40, len(lines))], nil))
		}
	}
	for _, text := range edgeCases {
		f.Add([]byte(text))
	}
	at := time.Unix(1764840012, 0)
	f.Fuzz(func(t *testing.T, text []byte) {
		for _, engine := range engines {
			got, err := ParseMetrics(engine, bytes.NewReader(text), at)
			want, refErr := parseMetricsExpfmt(engine, text, at)
			if refErr != nil || hasBracedName(text) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: ParseMetrics: %v; expfmt accepts the text", engine, err)
			}
			if !sameMetrics(got, want) {
				t.Fatalf("%s: ParseMetrics =\n%+v\nexpfmt mapping =\n%+v", engine, got, want)
			}
		}
	})
}

// hasBracedName reports whether a line of text opens with '{'.
func hasBracedName(text []byte) bool {
	for line := range bytes.SplitSeq(text, []byte("\n")) {
		if line = bytes.TrimLeft(line, " \t"); len(line) > 0 && line[0] == '{' {
			return true
		}
	}
	return false
}

func BenchmarkParseMetrics(b *testing.B) {
	benchmarkParse(b, func(text []byte, at time.Time) error {
		_, err := ParseMetrics(endpoint.EngineVLLM, bytes.NewReader(text), at)
		return err
	})
}

// BenchmarkParseMetricsExpfmt measures the expfmt-based reference, for comparison.
func BenchmarkParseMetricsExpfmt(b *testing.B) {
	benchmarkParse(b, func(text []byte, at time.Time) error {
		_, err := parseMetricsExpfmt(endpoint.EngineVLLM, text, at)
		return err
	})
}

func benchmarkParse(b *testing.B, parse func([]byte, time.Time) error) {
	text, err := os.ReadFile(filepath.Join("testdata", "vllm.txt"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	now := time.Now()
	for b.Loop() {
		if err := parse(text, now); err != nil {
			b.Fatal(err)
		}
	}
}
