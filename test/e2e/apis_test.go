package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// apiRoute is the route of the OpenAI API scenarios: least-request, an inference rule.
const apiRoute = "lr"

// servedBy returns the endpoint that served the response recorded in *resp, or "" when
// none was recorded.
func servedBy(resp **http.Response) string {
	if *resp == nil {
		return ""
	}
	return (*resp).Header.Get(endpoint)
}

// openAIAPIs: the models list and model lookup are answered by the gateway from the
// cache; embeddings, responses (streamed and not) and a multipart transcription, sent
// with the official OpenAI SDK, are routed by their model to an engine pod.
func openAIAPIs() {
	c := sys.client(apiRoute)
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()

	page, err := c.Models.List(ctx)
	Expect(err).NotTo(HaveOccurred())
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	Expect(ids).To(ContainElement(model))
	m, err := c.Models.Get(ctx, model)
	Expect(err).NotTo(HaveOccurred())
	Expect(m.ID).To(Equal(model))
	_, err = c.Models.Get(ctx, "no-such-model")
	Expect(apiError(err)).NotTo(BeNil())
	Expect(apiError(err).StatusCode).To(Equal(http.StatusNotFound))

	var resp *http.Response
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"orders by region", "orders by week"}},
	}, option.WithResponseInto(&resp))
	Expect(err).NotTo(HaveOccurred())
	Expect(emb.Data).To(HaveLen(2))
	Expect(servedBy(&resp)).To(HavePrefix(ns + "/llama-"))

	resp = nil
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello, responses!")},
		MaxOutputTokens: openai.Int(4),
	}, option.WithResponseInto(&resp))
	Expect(err).NotTo(HaveOccurred())
	Expect(r.OutputText()).NotTo(BeEmpty())
	Expect(servedBy(&resp)).To(HavePrefix(ns + "/llama-"))

	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream, please.")},
		MaxOutputTokens: openai.Int(4),
	})
	var deltas strings.Builder
	completed := false
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.AsResponseOutputTextDelta().Delta)
		case "response.completed":
			completed = true
		}
	}
	Expect(stream.Err()).NotTo(HaveOccurred())
	Expect(stream.Close()).To(Succeed())
	Expect(completed).To(BeTrue(), "the stream ends with response.completed")
	Expect(deltas.String()).NotTo(BeEmpty())

	resp = nil
	tr, err := c.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File:  openai.File(bytes.NewReader(bytes.Repeat([]byte{0x7f}, 64<<10)), "speech.wav", "audio/wav"),
		Model: model,
	}, option.WithResponseInto(&resp))
	Expect(err).NotTo(HaveOccurred())
	Expect(tr.Text).To(ContainSubstring("65536 bytes"))
	Expect(servedBy(&resp)).To(HavePrefix(ns+"/llama-"), "a multipart upload is routed by its model field")
}

// engineListedAdapters: two engines started with an adapter that no ModelAdapter names
// serve it through the gateway, because the engines list it; when one engine unloads it
// behind the cluster's back, no request fails (the engine's 404 is retried on the other)
// and routing stops sending it there.
func engineListedAdapters() {
	const adapter = "preloaded-lora"
	var pods []string
	for i, host := range []string{"127.0.0.41", "127.0.0.42"} {
		addr := sys.startEngine(GinkgoTB(), host, model, "--lora-modules", adapter+"=/adapters/preloaded")
		name := fmt.Sprintf("listed-%d", i)
		p := sys.cluster.EnginePod(GinkgoTB(), ns, name, model, addr, map[string]string{"app": service})
		DeferCleanup(func() { _ = sys.cluster.Delete(context.Background(), p) })
		pods = append(pods, addr)
	}
	c := sys.client(apiRoute)
	Eventually(func(g Gomega) {
		served := map[string]bool{}
		for range 8 {
			a := chat(c, adapter, "hello adapter", 2)
			g.Expect(a.err).NotTo(HaveOccurred())
			served[a.endpoint] = true
		}
		g.Expect(served).To(HaveLen(2))
	}).Should(Succeed(), "both engines that list the adapter serve it")

	// Unload it from the first engine, with requests in flight around the change.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if a := chat(c, adapter, "during the unload", 2); a.err != nil {
					mu.Lock()
					failures = append(failures, a.err.Error())
					mu.Unlock()
				}
			}
		})
	}
	resp, err := http.Post("http://"+pods[0]+"/v1/unload_lora_adapter", "application/json",
		strings.NewReader(`{"lora_name":"`+adapter+`"}`))
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.Body.Close()).To(Succeed())
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	// Within one models refresh, the gateway stops sending the adapter to listed-0.
	Eventually(func() []string {
		var got []string
		for range 10 {
			if a := chat(c, adapter, "after the unload", 2); a.err == nil && !slices.Contains(got, a.endpoint) {
				got = append(got, a.endpoint)
			}
		}
		return got
	}).Should(Equal([]string{pod("listed-1")}))
	close(stop)
	wg.Wait()
	Expect(failures).To(BeEmpty(), "requests for an adapter one engine unloaded must be retried elsewhere")
}
