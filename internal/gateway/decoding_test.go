package gateway_test

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/switchboard-llm/switchboard/api/v1alpha1"
	"github.com/switchboard-llm/switchboard/internal/endpoint"
	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// TestStreamedAnswersMarkTheirDecode checks, through the gateway process path against an
// engine-sim, that a streamed answer's request is listed as decoding on its pod from its
// first bytes until its end (the decodes whose ends the prefix-cache and least-latency
// predictions wait for), and that an answer that does not stream is never listed.
func TestStreamedAnswersMarkTheirDecode(t *testing.T) {
	const ns = "decoding-test"
	c := testenv.Start(t)
	engine := testenv.EngineProcess(t, "127.0.0.2", "llama-3-8b")
	_, view, base, _ := policyGateway(t, c, ns, v1alpha1.RoutingPolicySpec{Strategy: v1alpha1.StrategyLeastRequest}, []string{engine})
	key := endpoint.Key{Namespace: ns, Name: "llama-0"}

	deadline := time.Now().Add(waitTimeout)
	for status := 0; status != http.StatusOK; status, _ = post(base, "", chatBody("llama-3-8b", false)) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not serve llama-3-8b: %d", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	decoding := func() int {
		p, ok := view.Pod(key)
		if !ok {
			t.Fatal("the pod left the cache")
		}
		_, rank := p.DecodeEnd(time.Now(), 1, 0.01, 1)
		return rank
	}

	// A non-streamed answer of about a second: in flight, and never decoding.
	done := make(chan int, 1)
	go func() {
		status, _ := post(base, "", chatRequest(false, 60))
		done <- status
	}()
	for p, _ := view.Pod(key); p.Load().InFlight() == 0; p, _ = view.Pod(key) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // past the prefill, into the decode
	if n := decoding(); n != 0 {
		t.Errorf("%d decoding while only a non-streamed answer is in flight, want 0", n)
	}
	if status := <-done; status != http.StatusOK {
		t.Fatalf("the non-streamed request answered %d", status)
	}

	// A streamed answer: decoding from its first event until the stream ends.
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(chatRequest(true, 60)))
	if err != nil {
		t.Fatal(err)
	}
	events := bufio.NewReader(resp.Body)
	if _, err := events.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if n := decoding(); n != 1 {
		t.Errorf("%d decoding while a stream is relayed, want 1", n)
	}
	if _, err := events.WriteTo(new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for deadline := time.Now().Add(waitTimeout); decoding() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream still counts as decoding after it ended")
		}
	}
	if p, _ := view.Pod(key); p.Load().InFlight() != 0 {
		t.Errorf("%d in flight after every answer ended", p.Load().InFlight())
	}
}

// chatRequest returns a chat completion request for llama-3-8b of maxTokens output
// tokens, streamed if stream.
func chatRequest(stream bool, maxTokens int) []byte {
	return chatBodyOf("llama-3-8b", stream, maxTokens, "tell me a story")
}
