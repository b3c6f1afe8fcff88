package podrunner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/switchboard-llm/switchboard/internal/testenv"
)

// readEntries parses every line of the log at path.
func readEntries(t *testing.T, path string) []logEntry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []logEntry
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			t.Fatalf("log line %q does not end with a newline", line)
		}
		e, err := parseLogLine([]byte(strings.TrimSuffix(line, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	return entries
}

// newLog creates a log in a directory of the test.
func newLog(t *testing.T) *containerLog {
	t.Helper()
	l, err := createLog(filepath.Join(t.TempDir(), "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l
}

func TestCopyFromWritesALineOfLogPerLineOfOutputAndSplitsLongOnes(t *testing.T) {
	l := newLog(t)
	long := strings.Repeat("x", maxLogLine+10)
	before := time.Now()
	l.copyFrom("stderr", strings.NewReader("one\n\n"+long+"\nlast without newline"))
	l.close()

	type line struct {
		partial bool
		text    string
	}
	want := []line{{false, "one"}, {false, ""}, {true, long[:maxLogLine]}, {false, long[maxLogLine:]}, {false, "last without newline"}}
	entries := readEntries(t, l.path)
	if len(entries) != len(want) {
		t.Fatalf("got %d log lines, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		if got := (line{e.partial, string(e.text)}); got != want[i] || e.stream != "stderr" {
			t.Errorf("line %d = %s %v %.20q, want stderr %v %.20q", i, e.stream, got.partial, got.text, want[i].partial, want[i].text)
		}
		if e.time.Before(before.Add(-time.Microsecond)) || e.time.After(time.Now()) || e.time.Location() != time.UTC {
			t.Errorf("line %d has time %v, want the UTC time it was read", i, e.time)
		}
	}
}

func TestLogLineFormatIsCRI(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890000000, time.FixedZone("CET", 3600))
	got := string(appendLogLine(nil, at, "stdout", true, []byte("a b")))
	if want := "2026-03-04T04:06:07.89Z stdout P a b\n"; got != want {
		t.Errorf("log line = %q, want %q", got, want)
	}
	e, err := parseLogLine([]byte("2026-03-04T04:06:07.89Z stdout F:x  two spaces"))
	if err != nil || e.partial || string(e.text) != " two spaces" || !e.time.Equal(at) {
		t.Errorf("parse = %+v, %v; want a full line %q at %v", e, err, " two spaces", at)
	}
	for _, bad := range []string{"", "no-time stdout F x", "2026-03-04T04:06:07Z"} {
		if _, err := parseLogLine([]byte(bad)); err == nil {
			t.Errorf("parse %q succeeded, want an error", bad)
		}
	}
}

// logAt is the fixture of the printLog tests: five lines of output a second apart from
// t0, the third split in two partial lines, after a line that is not a log line.
func logAt(t *testing.T, t0 time.Time) *os.File {
	t.Helper()
	var b []byte
	b = append(b, "not a log line\n"...)
	b = appendLogLine(b, t0, "stdout", false, []byte("first"))
	b = appendLogLine(b, t0.Add(time.Second), "stderr", false, []byte("second"))
	b = appendLogLine(b, t0.Add(2*time.Second), "stdout", true, []byte("thi"))
	b = appendLogLine(b, t0.Add(2*time.Second), "stdout", false, []byte("rd"))
	b = appendLogLine(b, t0.Add(3*time.Second), "stdout", false, []byte("fourth"))
	path := filepath.Join(t.TempDir(), "c.log")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestPrintLog(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).UTC()
	stamp := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	for _, tc := range []struct {
		name string
		opts corev1.PodLogOptions
		want string
	}{
		{"All", corev1.PodLogOptions{}, "first\nsecond\nthird\nfourth\n"},
		{"TimestampsOncePerLine", corev1.PodLogOptions{Timestamps: true},
			stamp(0) + " first\n" + stamp(time.Second) + " second\n" + stamp(2*time.Second) + " third\n" + stamp(3*time.Second) + " fourth\n"},
		{"SinceTimeKeepsLinesAtOrAfterIt", corev1.PodLogOptions{SinceTime: &metav1.Time{Time: t0.Add(time.Second)}}, "second\nthird\nfourth\n"},
		{"SinceSecondsCountsFromNow", corev1.PodLogOptions{SinceSeconds: ptr.To[int64](3600 - 2)}, "fourth\n"},
		{"TailCountsLinesOfTheFile", corev1.PodLogOptions{TailLines: ptr.To[int64](4)}, "second\nthird\nfourth\n"},
		{"TailOfOne", corev1.PodLogOptions{TailLines: ptr.To[int64](1)}, "fourth\n"},
		{"TailOfZero", corev1.PodLogOptions{TailLines: ptr.To[int64](0)}, ""},
		{"TailLongerThanTheLog", corev1.PodLogOptions{TailLines: ptr.To[int64](100)}, "first\nsecond\nthird\nfourth\n"},
		{"TailThenSince", corev1.PodLogOptions{TailLines: ptr.To[int64](4), SinceTime: &metav1.Time{Time: t0.Add(3 * time.Second)}}, "fourth\n"},
		{"LimitBytesCutsTheOutput", corev1.PodLogOptions{LimitBytes: ptr.To[int64](8)}, "first\nse"},
		{"LimitBytesCountsTimestamps", corev1.PodLogOptions{LimitBytes: ptr.To[int64](5), Timestamps: true}, stamp(0)[:5]},
		{"OneStream", corev1.PodLogOptions{Stream: ptr.To(corev1.LogStreamStderr)}, "second\n"},
		{"AllStreams", corev1.PodLogOptions{Stream: ptr.To(corev1.LogStreamAll)}, "first\nsecond\nthird\nfourth\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := printLog(context.Background(), &out, logAt(t, t0), &tc.opts, nil); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("printLog = %q, want %q", out.String(), tc.want)
			}
		})
	}
}

func TestSeekTailAcrossBlocks(t *testing.T) {
	var b bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int64{1, 4321, 19999, 20000, 20001} {
		if err := seekTail(f, n); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		first := fmt.Sprintf("line %d\n", max(0, 20000-n))
		if lines := int64(bytes.Count(rest, []byte{'\n'})); lines != min(n, 20000) || !bytes.HasPrefix(rest, []byte(first)) {
			t.Errorf("tail %d: %d lines from %.12q, want %d from %q", n, lines, rest, min(n, 20000), first)
		}
	}
}

func TestCreateLogKeepsThePreviousRunsLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	for _, run := range []string{"first", "second", "third"} {
		l, err := createLog(path)
		if err != nil {
			t.Fatal(err)
		}
		l.copyFrom("stdout", strings.NewReader(run+"\n"))
		l.close()
	}
	for path, want := range map[string]string{path: "third", previousLog(path): "second"} {
		if e := readEntries(t, path); len(e) != 1 || string(e[0].text) != want {
			t.Errorf("%s holds %+v, want the %s run's line only", filepath.Base(path), e, want)
		}
	}
}

// follow runs printLog on l's file with live set to l, and returns what it writes and
// a channel that receives its error once it returns.
func follow(ctx context.Context, t *testing.T, l *containerLog, opts *corev1.PodLogOptions) (*testenv.Buffer, <-chan error) {
	t.Helper()
	f, err := l.openLive()
	if err != nil || f == nil {
		t.Fatalf("open live log: %v, %v", f, err)
	}
	t.Cleanup(func() { f.Close() })
	out := &testenv.Buffer{}
	done := make(chan error, 1)
	go func() { done <- printLog(ctx, out, f, opts, l) }()
	return out, done
}

// returns waits for done to receive within 5s.
func returns(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("printLog: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("printLog did not return once %s", what)
	}
}

func TestFollowPrintsLinesAsTheyComeUntilTheLogCloses(t *testing.T) {
	l := newLog(t)
	l.write(appendLogLine(nil, time.Now(), "stdout", false, []byte("before")))
	out, done := follow(context.Background(), t, l, &corev1.PodLogOptions{})
	testenv.WaitUntil(t, 5*time.Second, "the existing line is printed", func() bool { return out.String() == "before\n" })

	// A log line written in two parts is printed once, whole.
	line := appendLogLine(nil, time.Now(), "stdout", false, []byte("after"))
	l.write(line[:10])
	time.Sleep(20 * time.Millisecond)
	l.write(line[10:])
	testenv.WaitUntil(t, 5*time.Second, "the new line is printed", func() bool { return out.String() == "before\nafter\n" })

	l.close()
	returns(t, done, "the log closed")
	if got := out.String(); got != "before\nafter\n" {
		t.Errorf("followed %q, want both lines once", got)
	}
}

func TestFollowStopsWhenTheContextEnds(t *testing.T) {
	l := newLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, done := follow(ctx, t, l, &corev1.PodLogOptions{})
	cancel()
	returns(t, done, "its context ended")
}

func TestFollowFromTheTailStopsAtTheByteLimit(t *testing.T) {
	l := newLog(t)
	l.write(appendLogLine(appendLogLine(nil, time.Now(), "stdout", false, []byte("old")), time.Now(), "stdout", false, []byte("recent")))
	out, done := follow(context.Background(), t, l, &corev1.PodLogOptions{TailLines: ptr.To[int64](1), LimitBytes: ptr.To[int64](10)})
	testenv.WaitUntil(t, 5*time.Second, "the last line is printed", func() bool { return out.String() == "recent\n" })
	l.write(appendLogLine(nil, time.Now(), "stdout", false, []byte("newest")))
	returns(t, done, "it wrote the byte limit")
	if got := out.String(); got != "recent\nnew" {
		t.Errorf("followed %q, want the last line and the next up to 10 bytes", got)
	}
}
