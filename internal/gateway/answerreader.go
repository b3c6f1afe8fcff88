package gateway

import (
	"github.com/switchboard-llm/switchboard/internal/openai"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// answerReader reads an engine's 200 answer as it passes, for what routing learns from
// it: the first bytes of a streamed answer, which come with the first token, mark the
// request as decoding; the usage the answer ends with corrects the routing algorithm,
// where it wants it. The relay and the ext_proc picker both read answers with one. The
// zero value reads nothing.
type answerReader struct {
	// maxTokens bounds the request's output (0: not set).
	maxTokens int64
	// decodePending is set until the first bytes of an answer that streams.
	decodePending bool
	// scan is whether usage watches the answer.
	scan  bool
	usage openai.UsageScanner
}

// decoder is what a request's decode is recorded on: a routing.Target, or the
// cache.Reservation the picker moved it to.
type decoder interface{ Decoding(maxTokens int64) }

// newAnswerReader returns the reader of the 200 answer to req from target.
func newAnswerReader(req *openai.Request, target *routing.Target) answerReader {
	return answerReader{maxTokens: req.MaxTokens, decodePending: req.Stream, scan: target.WantsReport()}
}

// read reads the answer's next chunk, never empty, marking the request as decoding on d
// at the first one of an answer that streams.
func (a *answerReader) read(chunk []byte, d decoder) {
	if a.decodePending {
		a.decodePending = false
		d.Decoding(a.maxTokens)
	}
	if a.scan {
		_, _ = a.usage.Write(chunk)
	}
}

// report passes the usage the answer ended with, if it was watched and reported the
// cached tokens, to the routing algorithm that chose target.
func (a *answerReader) report(target *routing.Target) {
	if !a.scan {
		return
	}
	if u, ok := a.usage.Usage(); ok {
		target.Report(routing.Usage{PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens})
	}
}
