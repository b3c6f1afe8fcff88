package openai

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// invalidValues are JSON values, or what looks like them, that RFC 8259 rejects.
var invalidValues = []string{
	`[1,]`, `[,1]`, `[1 2]`, `[1,,2]`, `[`, `]`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{"a"}`,
	`{1:2}`, `{"a":1 "b":2}`, `{"a":1]`, `[1}`, `01`, `-01`, `1.`, `.5`, `-`, `+1`, `1e`, `1e+`, `0x1`,
	`tru`, `truex`, `nul`, `nulll`, `True`, `NaN`, `"a`, "\"\x01\"", `"tab	in"`, `"\q"`, `"\u12g4"`,
	`"\u12"`, `[1]]`, `{}}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

// TestParseFastRejectsInvalidJSON checks that parseFast gives up on invalid JSON
// wherever it is in the body (a field it reads or one it skips, in strings at every
// offset of a word), leaving the error to encoding/json.
func TestParseFastRejectsInvalidJSON(t *testing.T) {
	var bodies []string
	for _, v := range invalidValues {
		bodies = append(bodies, `{"model":"m","prompt":"p","x":`+v+`}`, `{"model":"m","x":[`+v+`],"prompt":"p"}`)
	}
	for pad := range 17 { // a bad byte at each offset of the words the scanner reads
		run := strings.Repeat("a", pad)
		for _, bad := range []string{"\x1f", "\x00", "\n", `\x`, `\u0g`} {
			bodies = append(bodies, `{"model":"m","prompt":"`+run+bad+`bcdefghijklmnopq"}`,
				`{"model":"m","prompt":"p","x":"`+run+bad+`"}`)
		}
	}
	bodies = append(bodies, ``, ` `, `{`, `}`, `{"model":"m","prompt":"p"`, `{"model":"m","prompt":"p"}}`,
		`{"model":"m","prompt":"p"} {}`, `{"model":"m","prompt":"p"} x`, `{"model":"m","prompt":"p",}`,
		`{"model":"m" "prompt":"p"}`, `{"model":"m","prompt":"p"]`, `[{"model":"m","prompt":"p"}]`,
		`{"model":"m","messages":[{"role":"r","content":"c"},]}`, `{"model":"m","max_tokens":1 2,"prompt":"p"}`,
		"\ufeff"+`{"model":"m","prompt":"p"}`)
	for _, body := range bodies {
		if acceptsFast(t, []byte(body)) {
			t.Errorf("parseFast(%q) accepted it", body)
		}
		if _, err := parseRequestJSON([]byte(body)); err == nil {
			t.Errorf("parseRequestJSON(%q) accepted it: not an invalid body", body)
		}
	}
}

// TestParseFastLeavesInvalidUTF8ToEncodingJSON checks that parseFast gives up on
// strings that encoding/json decodes with replacement characters: invalid UTF-8 at
// every offset of a word, and unpaired surrogate escapes, in fields it reads or skips.
func TestParseFastLeavesInvalidUTF8ToEncodingJSON(t *testing.T) {
	var strs []string
	for pad := range 17 {
		run := strings.Repeat("a", pad)
		for _, bad := range []string{"\xff", "\xc3(", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80"} {
			strs = append(strs, run+bad+"bcdefghijklmnopq", run+bad)
		}
	}
	strs = append(strs, `\ud800`, `\udc00`, `\udc00\ud800`, `\ud800\u0041`, `\ud800\ud800`)
	for _, str := range strs {
		for _, body := range []string{`{"model":"m","prompt":"` + str + `"}`, `{"model":"m","prompt":"p","x":"` + str + `"}`} {
			if acceptsFast(t, []byte(body)) {
				t.Errorf("parseFast(%q) accepted it", body)
			}
			if _, err := parseRequestJSON([]byte(body)); err != nil {
				t.Errorf("parseRequestJSON(%q): %v", body, err)
			}
		}
	}
}

// TestParseFastDecodesStringsAtEveryOffset checks prompts built of runs of plain text of
// every length around a word, between escapes and multi-byte runes, against
// encoding/json.
func TestParseFastDecodesStringsAtEveryOffset(t *testing.T) {
	pieces := []string{`\n`, `\"`, `\\`, `\/`, `\u00e9`, `\ud83d\ude00`, "é", "日本", "😀", `\t`}
	for n := range 20 {
		for _, piece := range pieces {
			run := strings.Repeat("x", n)
			for _, text := range []string{run + piece, piece + run, run + piece + run + piece, run} {
				body := `{"model":"m","messages":[{"role":"user","content":"` + text + `"}],"x":"` + text + `"}`
				if !acceptsFast(t, []byte(body)) {
					t.Errorf("parseFast gave up on %s", body)
				}
				checkParseFast(t, []byte(body))
			}
		}
	}
}

// TestPlainPrefixMatchesByteByByte checks plainPrefix (32 bytes at a time where the CPU
// can) and plainPrefixWords against the byte-by-byte definition, on random runs of the
// bytes that matter at every length up to 300 and with the first special byte anywhere.
func TestPlainPrefixMatchesByteByByte(t *testing.T) {
	alphabet := []byte{'a', ' ', '\\', '"', 0x00, 0x1f, 0x20, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xa0, 0xdc, 0xff}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		b := make([]byte, rnd.IntN(300))
		odds := 1 + rnd.IntN(len(b)+1) // one byte in odds is drawn from the alphabet
		ascii := true
		for i := range b {
			b[i] = 'a'
			if rnd.IntN(odds) == 0 {
				b[i] = alphabet[rnd.IntN(len(alphabet))]
			}
			ascii = ascii && b[i] < 0x80
		}
		wantN, wantASCII := plainPrefixBytes(b)
		for name, plain := range map[string]func([]byte) (int, bool){"plainPrefix": plainPrefix, "plainPrefixWords": plainPrefixWords} {
			n, gotASCII := plain(b)
			// ascii may be false for bytes after the prefix, never true for a prefix
			// that is not ASCII, and is true for a run that is all ASCII.
			if n != wantN || (gotASCII && !wantASCII) || (ascii && !gotASCII) {
				t.Fatalf("%s(%q) = %d, %v; want %d, %v", name, b, n, gotASCII, wantN, wantASCII)
			}
		}
	}
}

// TestScannerSkipsValidJSON checks that skip reads the values encoding/json accepts,
// whatever their shape, and that parseFast then reads the fields after them.
func TestScannerSkipsValidJSON(t *testing.T) {
	values := []string{`0`, `-0`, `-1.5e-3`, `1E+2`, `12345678901234567890`, `true`, `false`, `null`, `""`,
		`"\u0000"`, `[]`, `{}`, ` [ 1 , "a" , { "b" : [ null ] } ] `, `{"a":{"a":1},"a":2}`,
		"\t\n\r [\n1\n]", `"` + strings.Repeat(`\\`, 9) + `"`}
	for _, v := range values {
		if !json.Valid([]byte(v)) {
			t.Fatalf("%s is not valid JSON", v)
		}
		body := `{"x":` + v + `,"model":"m","prompt":"p"}`
		req, ok := parseFast([]byte(body), true)
		if !ok || req.Model != "m" || req.Prompt != "p" {
			t.Errorf("parseFast(%s) = %+v, %v", body, req, ok)
		}
		checkParseFast(t, []byte(body))
	}
}
