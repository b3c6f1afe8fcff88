package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// fastCases are bodies parseFast must accept, with the same result as parseRequestJSON.
var fastCases = []string{
	`{"model":"m","prompt":"p"}`,
	` {"model" : "m" , "prompt" : [ "a" , "b" ] , "stream" : false } `,
	`{"model":"m","stream":true,"max_tokens":0,"max_completion_tokens":null,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":-0,"max_completion_tokens":7,"prompt":""}`,
	`{"model":"m\u00e9\ud83d\ude00","prompt":"a\"b\\c\/d\b\f\n\r\t\u0000\u00e9\u4e2d\ud83d\ude00"}`,
	`{"model":"m","messages":[{"content":"before role","role":"user"},{"role":"assistant","content":null}]}`,
	`{"model":"m","messages":[{"role":"u","content":"x"},{"content":[{"type":"text","text":"a\nb"},{"type":"image_url","text":"c"}],"role":"r\u00e9"},{"content":"y","role":"a"}]}`,
	`{"model":"m","messages":[{"content":[{"text":"a","type":"text"},{"text":"b","type":"image_url"},{"type":"text"},{"type":null,"text":"c"},{"type":"te\u0078t","text":"d"},{}],"role":"u"}]}`,
	`{"model":"m","messages":[{"role":"r","name":"n","content":[],"tool_calls":[{"id":"1","function":{"name":"f","arguments":"{}"}}]}]}`,
	`{"model":"m","temperature":-1.5e-3,"top_p":0.1E+2,"stop":["a",null,true,false,{"x":[[]],"y":{}}],"prompt":"p"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":{"a":{"b":{"c":[1,2,{"d":"\u0041"}]}}}}`,
	// jsontext and encoding/json both accept nesting up to 10000 levels, the body's
	// object included.
	`{"model":"m","prompt":"p","x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	`{"model":"m","prompt":"p","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
}

// slowOnlyCases are valid bodies parseFast leaves to encoding/json.
var slowOnlyCases = []string{
	`{"Model":"m","prompt":"p"}`,
	`{"model":"m","PROMPT":"p"}`,
	`{"model":"m","ſtream":true,"prompt":"p"}`,
	`{"model":"m","mod\u0065l":"n","prompt":"p"}`,
	`{"model":"m","prompt":"p","k\u00e9y":1}`,
	`{"model":"m","model":"n","prompt":"p"}`,
	`{"model":"m","prompt":"p","prompt":null,"messages":[{"role":"r","content":"c"}]}`,
	`{"model":"m","messages":[{"role":"r","Content":"c"}]}`,
	`{"model":"m","messages":[{"role":"r","content":[{"type":"text","Text":"c"}]}]}`,
	`{"model":"m","messages":[{"role":"r","content":[{"type":"text","type":null,"text":"c"}]}]}`,
	// Invalid UTF-8 and unpaired surrogate escapes, which encoding/json decodes as
	// U+FFFD.
	`{"model":"m","prompt":"lone \ud800 and \udc00 and \ud800\u0041 and \ud800\ud800\udc00"}`,
	// Invalid UTF-8, which encoding/json decodes with each invalid byte replaced.
	"{\"model\":\"m\",\"prompt\":\"bad \xff utf8 \xed\xa0\x80 \xe2\x82 ok \xef\xbf\xbd\"}",
}

func TestParseFast(t *testing.T) {
	for _, body := range fastCases {
		checkParseFast(t, []byte(body))
		if !acceptsFast(t, []byte(body)) {
			t.Errorf("parseFast gave up on %s", body)
		}
	}
	for _, body := range slowOnlyCases {
		checkParseFast(t, []byte(body))
		if acceptsFast(t, []byte(body)) {
			t.Errorf("parseFast accepted %s", body)
		}
		if _, err := parseRequestJSON([]byte(body)); err != nil {
			t.Errorf("parseRequestJSON(%s): %v", body, err)
		}
	}
}

// acceptsFast reports whether parseFast accepts body, failing t if it accepts it only
// with or only without the prompt's text.
func acceptsFast(t *testing.T, body []byte) bool {
	t.Helper()
	_, withText := parseFast(body, true)
	_, withoutText := parseFast(body, false)
	if withText != withoutText {
		t.Fatalf("parseFast(%q) accepts it with the text: %v, without: %v", body, withText, withoutText)
	}
	return withText
}

// checkParseFast checks that when parseFast accepts body, parseRequestJSON accepts it
// too with the same result, and that parseFast without the prompt's text accepts it
// with the same result but for the text.
func checkParseFast(t *testing.T, body []byte) {
	t.Helper()
	fast, ok := parseFast(body, true)
	if !ok {
		return
	}
	slow, err := parseRequestJSON(body)
	if err != nil || slow != fast {
		t.Fatalf("body %q:\nparseFast        = %+v\nparseRequestJSON = %+v, %v", body, fast, slow, err)
	}
	counted, ok := parseFast(body, false)
	slow.Prompt = ""
	if !ok || counted != slow {
		t.Fatalf("body %q:\nparseFast without text = %+v, %v\nwant                   = %+v", body, counted, ok, slow)
	}
}

// FuzzParseFast checks parseFast against parseRequestJSON, the definition of
// ParseRequest's behaviour.
func FuzzParseFast(f *testing.F) {
	for _, body := range append(fastCases, slowOnlyCases...) {
		f.Add([]byte(body))
	}
	for _, body := range []string{`{"model":"m",`, `{"model":"m","prompt":"p"} x`, ``, ` null `,
		`{"model":"m","messages":[{"role":"user","content":[null]}]}`, `{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","max_tokens":1.5,"prompt":"p"}`, `{"model":"m","messages":[null]}`} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkParseFast(t, body)
		// Also check bodies whose prompt is built from the fuzz input, so that the
		// fuzzer exercises string decoding without having to produce valid JSON.
		for _, wrap := range []string{`{"model":"m","prompt":"%s"}`, `{"model":"m","messages":[{"role":"r","content":[{"type":"text","text":"%s"}]}]}`} {
			checkParseFast(t, []byte(strings.Replace(wrap, "%s", string(body), 1)))
		}
		if q, err := json.Marshal(string(body)); err == nil {
			checkParseFast(t, []byte(`{"model":"m","prompt":`+string(q)+`}`))
		}
	})
}
