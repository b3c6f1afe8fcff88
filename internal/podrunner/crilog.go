package podrunner

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Container logs are files in the CRI log format that kubelet reads: a line of the file
// per line of output, "<RFC3339Nano time> <stdout|stderr> <F|P> <text>". Tag P marks a
// partial line: a line of output longer than maxLogLine is split into partial lines
// ending with a full (F) one. A container's log is <pod dir>/<container>.log; when the
// container restarts, the log of its previous run becomes <container>.log.1.

// maxLogLine is the longest text of a log line, as in containerd.
const maxLogLine = 16 * 1024

// drainTimeout bounds how long the output of an exited process is still copied to its
// log: longer only if a descendant outside its process group keeps the output open.
const drainTimeout = time.Second

// logPath is the log of the container named container of the pod whose directory is
// dir.
func logPath(dir, container string) string { return filepath.Join(dir, container+".log") }

// previousLog is the log of the previous run of the container whose log is path.
func previousLog(path string) string { return path + ".1" }

// containerLog is the log of one run of a container's process.
//
// Synchronisation: path is read-only. mu guards f and appended. The goroutines copying
// the process's stdout and stderr write whole lines under mu; every write, and close,
// closes appended and (until close) replaces it, waking those who follow the log. f is
// nil once the log is closed: the process has exited and all its output is written.
type containerLog struct {
	path string

	mu       sync.Mutex
	f        *os.File
	appended chan struct{}
}

// createLog keeps the log at path, if any, as the previous run's log (replacing an older
// one) and creates an empty log at path.
func createLog(path string) (*containerLog, error) {
	if err := os.Rename(path, previousLog(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("keep the previous log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log: %w", err)
	}
	return &containerLog{path: path, f: f, appended: make(chan struct{})}, nil
}

// copyFrom copies the output stream src, named "stdout" or "stderr", into the log until
// src ends, a log line per line of output (split if longer than maxLogLine) stamped
// with the time it was read. A last line without a newline is written as a full line.
// What src has ready at once goes into the file with one write; output the file does
// not take is lost, as the process must not block on its output.
func (l *containerLog) copyFrom(stream string, src io.Reader) {
	r := bufio.NewReaderSize(src, maxLogLine)
	var batch []byte
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			partial := errors.Is(err, bufio.ErrBufferFull)
			batch = appendLogLine(batch, time.Now(), stream, partial, bytes.TrimSuffix(line, []byte{'\n'}))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			l.write(batch)
			return
		}
		if !lineReady(r) {
			l.write(batch)
			batch = batch[:0]
		}
	}
}

// lineReady reports whether r can return a line, or a full buffer, without reading
// from its source.
func lineReady(r *bufio.Reader) bool {
	n := r.Buffered()
	if n == r.Size() {
		return true
	}
	buffered, _ := r.Peek(n)
	return bytes.IndexByte(buffered, '\n') >= 0
}

// appendLogLine appends to b the log line of text, read from stream at t, partial or
// full.
func appendLogLine(b []byte, t time.Time, stream string, partial bool, text []byte) []byte {
	b = t.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, stream...)
	if partial {
		b = append(b, " P "...)
	} else {
		b = append(b, " F "...)
	}
	b = append(b, text...)
	return append(b, '\n')
}

// write appends log lines to the file, unless the log is closed.
func (l *containerLog) write(lines []byte) {
	if len(lines) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	_, _ = l.f.Write(lines)
	close(l.appended)
	l.appended = make(chan struct{})
}

// close closes the log once all of its process's output is written.
func (l *containerLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	_ = l.f.Close()
	l.f = nil
	close(l.appended)
}

// watch returns a channel that is closed when the log is next written to or closed, and
// whether the log is still open.
func (l *containerLog) watch() (<-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appended, l.f != nil
}

// openLive opens the log for reading if it is still open, and returns nil if it is
// closed: its path may hold a later run's log by then.
func (l *containerLog) openLive() (*os.File, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil, nil
	}
	return os.Open(l.path)
}

// logEntry is one line of a log.
type logEntry struct {
	time    time.Time
	stream  string
	partial bool
	text    []byte // without the newline
}

// parseLogLine parses a log line without its newline; text refers to line's bytes.
func parseLogLine(line []byte) (logEntry, error) {
	stamp, rest, ok1 := bytes.Cut(line, []byte{' '})
	stream, rest, ok2 := bytes.Cut(rest, []byte{' '})
	tags, text, _ := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 {
		return logEntry{}, fmt.Errorf("not a CRI log line: %q", line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(stamp))
	if err != nil {
		return logEntry{}, fmt.Errorf("not a CRI log line: %w", err)
	}
	tag, _, _ := bytes.Cut(tags, []byte{':'})
	return logEntry{time: t, stream: string(stream), partial: string(tag) == "P", text: text}, nil
}

// printLog writes the log read from f to w as opts say (Follow and Previous aside:
// live says whether to follow), as kubelet does: from the start of the last
// opts.TailLines lines of the file, the text of every line not older than
// opts.SinceTime or opts.SinceSeconds from the stream opts.Stream names, prefixed with
// its time if opts.Timestamps, a partial line without a newline, until
// opts.LimitBytes are written. If live is not nil, f is its file: at the end of f
// printLog flushes w (if it has a Flush method) and waits for more lines until live is
// closed or ctx ends. Lines that cannot be parsed are skipped.
func printLog(ctx context.Context, w io.Writer, f *os.File, opts *corev1.PodLogOptions, live *containerLog) error {
	if opts.TailLines != nil {
		if err := seekTail(f, *opts.TailLines); err != nil {
			return err
		}
	}
	p := newLogPrinter(w, opts, time.Now())
	r := bufio.NewReaderSize(f, 2*maxLogLine)
	var pending []byte // the start of a line still being written, or longer than r's buffer
	for {
		var appended <-chan struct{}
		open := false
		if live != nil {
			appended, open = live.watch()
		}
		for {
			chunk, err := r.ReadSlice('\n')
			line := chunk
			if len(pending) > 0 || err != nil {
				pending = append(pending, chunk...)
				line = pending
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("read log: %w", err)
			}
			e, err := parseLogLine(line[:len(line)-1])
			pending = pending[:0]
			if err != nil {
				continue
			}
			if more, err := p.print(e); err != nil || !more {
				return err
			}
		}
		if !open {
			return nil
		}
		if fl, ok := w.(interface{ Flush() }); ok {
			fl.Flush()
		}
		select {
		case <-appended:
		case <-ctx.Done():
			return nil
		}
	}
}

// seekTail moves f to the start of its last n lines, or to its start if it has fewer.
func seekTail(f *os.File, n int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size, start := fi.Size(), int64(0)
	if n == 0 {
		start = size
	}
	block := make([]byte, 32*1024)
	found := int64(0)
search:
	for end := size; end > 0 && n > 0; {
		from := max(0, end-int64(len(block)))
		b := block[:end-from]
		if _, err := f.ReadAt(b, from); err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		for i := len(b) - 1; i >= 0; i-- {
			// A newline starts the line after it, except the one that ends the file.
			if b[i] == '\n' && from+int64(i) != size-1 {
				if found++; found == n {
					start = from + int64(i) + 1
					break search
				}
			}
		}
		end = from
	}
	_, err = f.Seek(start, io.SeekStart)
	return err
}

// logPrinter writes log entries as a kubelet answers a request for a container's log.
type logPrinter struct {
	w          io.Writer
	since      time.Time // older entries are skipped
	stream     string    // entries of other streams are skipped; "" keeps all
	timestamps bool
	left       int64 // bytes still to write; negative: no limit
	midLine    bool  // the last entry written was partial
	out        []byte
}

// newLogPrinter returns a printer to w of what opts ask for at time now.
func newLogPrinter(w io.Writer, opts *corev1.PodLogOptions, now time.Time) *logPrinter {
	p := &logPrinter{w: w, timestamps: opts.Timestamps, left: -1}
	switch {
	case opts.SinceTime != nil:
		p.since = opts.SinceTime.Time
	case opts.SinceSeconds != nil:
		p.since = now.Add(-time.Duration(*opts.SinceSeconds) * time.Second)
	}
	if opts.Stream != nil && *opts.Stream != corev1.LogStreamAll {
		p.stream = strings.ToLower(*opts.Stream)
	}
	if opts.LimitBytes != nil {
		p.left = *opts.LimitBytes
	}
	return p
}

// print writes e and reports whether to go on: false once the byte limit is reached.
func (p *logPrinter) print(e logEntry) (bool, error) {
	if e.time.Before(p.since) || (p.stream != "" && e.stream != p.stream) {
		return true, nil
	}
	p.out = p.out[:0]
	if p.timestamps && !p.midLine {
		p.out = append(e.time.AppendFormat(p.out, time.RFC3339Nano), ' ')
	}
	p.out = append(p.out, e.text...)
	if !e.partial {
		p.out = append(p.out, '\n')
	}
	p.midLine = e.partial
	out := p.out
	if p.left >= 0 && int64(len(out)) > p.left {
		out = out[:p.left]
	}
	if _, err := p.w.Write(out); err != nil {
		return false, err
	}
	if p.left >= 0 {
		p.left -= int64(len(out))
		return p.left > 0, nil
	}
	return true, nil
}
