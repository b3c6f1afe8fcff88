package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// requestTimeout bounds every request of the suite.
const requestTimeout = 20 * time.Second

// client returns an OpenAI client of the primary gateway's listener whose requests take
// route: the route of that name, or the default route when it is empty.
func (s *system) client(route string, opts ...option.RequestOption) openai.Client {
	return s.clientOn(gatewayAddr, route, opts...)
}

// clientOn is client for the gateway replica listening on host.
func (s *system) clientOn(host, route string, opts ...option.RequestOption) openai.Client {
	all := []option.RequestOption{
		option.WithBaseURL("http://" + net.JoinHostPort(host, s.listenPort) + "/v1/"),
		option.WithAPIKey("e2e"),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(requestTimeout),
	}
	if route != "" {
		all = append(all, option.WithHeader(routeHdr, route))
	}
	return openai.NewClient(append(all, opts...)...)
}

// ask sends one chat completion with a user prompt and returns the endpoint that served it.
func ask(c openai.Client, model, prompt string, maxTokens int64, opts ...option.RequestOption) (string, error) {
	ep, _, err := converse(c, model, []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, maxTokens, opts...)
	return ep, err
}

// converse sends one chat completion and returns the endpoint that served it and the reply.
func converse(c openai.Client, model string, msgs []openai.ChatCompletionMessageParamUnion, maxTokens int64, opts ...option.RequestOption) (string, string, error) {
	var resp *http.Response
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: model, Messages: msgs, MaxTokens: openai.Int(maxTokens),
	}, append(opts, option.WithResponseInto(&resp))...)
	if err != nil {
		return "", "", err
	}
	if len(chat.Choices) == 0 {
		return "", "", errors.New("a completion without choices")
	}
	return resp.Header.Get(endpoint), chat.Choices[0].Message.Content, nil
}

// answer is what the gateway answered one chat completion with, failed or not.
type answer struct {
	status   int         // 0 when no response arrived
	endpoint string      // x-switchboard-endpoint
	header   http.Header // nil when no response arrived
	err      error       // nil for a completion with a choice
}

// code returns the OpenAI error code of a failed answer, or "".
func (a answer) code() string {
	if e := apiError(a.err); e != nil {
		return e.Code
	}
	return ""
}

// chat sends one chat completion with a user prompt and returns the answer.
func chat(c openai.Client, model, prompt string, maxTokens int64, opts ...option.RequestOption) answer {
	var resp *http.Response
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	completion, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(maxTokens),
	}, append(opts, option.WithResponseInto(&resp))...)
	if err == nil && len(completion.Choices) == 0 {
		err = errors.New("a completion without choices")
	}
	a := answer{err: err}
	if resp != nil {
		a.status, a.endpoint, a.header = resp.StatusCode, resp.Header.Get(endpoint), resp.Header
	}
	return a
}

// session is the request option that puts a request in session id.
func session(id string) option.RequestOption { return option.WithHeader("x-session-id", id) }

// apiError returns err as an OpenAI API error, or nil if it is not one.
func apiError(err error) *openai.Error {
	var e *openai.Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// pod is the endpoint name of pod llama-i.
func pod(name string) string { return ns + "/" + name }

// kubectl runs the real kubectl as an administrator and returns its combined output.
func (s *system) kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, testenv.Kubectl(), append([]string{"--kubeconfig", s.kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), errors.Join(err, errors.New(strings.TrimSpace(string(out))))
	}
	return string(out), nil
}

// routable returns the endpoints (namespace/pod) serving model that the metadata service
// lists as routable.
func (s *system) routable(model string) []string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + s.metadata + "/v1/endpoints")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			Namespace, Name, Model string
			Routable               bool
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil
	}
	var names []string
	for _, e := range list.Data {
		if e.Model == model && e.Routable {
			names = append(names, e.Namespace+"/"+e.Name)
		}
	}
	return names
}

// enginesIdleSince reports whether the metadata service shows every routable pod of model
// idle (no running request, empty KV cache) in a scrape taken after since. The gateway
// scrapes on the same interval, so once this holds for a scrape a couple of intervals
// after since, routers there see idle engines too rather than a burst that has ended.
func (s *system) enginesIdleSince(model string, since time.Time) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + s.metadata + "/v1/endpoints?model=" + model)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			Routable bool
			Metrics  *struct {
				ScrapedAt    time.Time `json:"scraped_at"`
				Running      float64   `json:"running"`
				KVCacheUsage float64   `json:"kv_cache_usage"`
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		return false
	}
	for _, e := range list.Data {
		if !e.Routable {
			continue
		}
		if m := e.Metrics; m == nil || m.ScrapedAt.Before(since) || m.Running != 0 || m.KVCacheUsage != 0 {
			return false
		}
	}
	return true
}

// gatewayMetricsText returns the primary gateway's Prometheus exposition.
func (s *system) gatewayMetricsText() (string, error) { return metricsText(s.gatewayMetrics) }

// metricsText returns the Prometheus exposition served on addr.
func metricsText(addr string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", errors.New("metrics: " + resp.Status)
	}
	return string(body), err
}

// cell returns the text in column col of the row named name (or */name) of a kubectl
// table; a listing of several kinds has one header per kind.
func cell(table, name, col string) string {
	var header string
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "NAME" || f[0] == "NAMESPACE" {
			header = line
			continue
		}
		if got := field(header, line, "NAME"); got == name || strings.HasSuffix(got, "/"+name) {
			return field(header, line, col)
		}
	}
	return ""
}

// field returns the cell of row under column col of header: kubectl aligns every cell with
// the start of its column's heading.
func field(header, row, col string) string {
	var starts []int
	at := -1
	for i := range len(header) {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
			if strings.HasPrefix(header[i:], col+" ") || header[i:] == col {
				at = len(starts) - 1
			}
		}
	}
	if at < 0 || starts[at] >= len(row) {
		return ""
	}
	end := len(row)
	if at+1 < len(starts) && starts[at+1] < end {
		end = starts[at+1]
	}
	return strings.TrimSpace(row[starts[at]:end])
}

// logf writes to the spec's output, shown with -v or on failure.
func logf(format string, args ...any) { GinkgoWriter.Printf(format+"\n", args...) }
