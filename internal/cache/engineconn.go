package cache

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/switchboard-llm/switchboard/internal/h1resp"
	"github.com/switchboard-llm/switchboard/internal/writewait"
)

// This file holds the Scraper's side of HTTP: each engine's connection and the exchanges
// a worker makes on it. A worker writes a request prepared once per engine and reads the
// answer with h1resp.ReadResponse on the connection, in its own goroutine: no Transport,
// with its connection goroutines and hand-offs, stands between the scrape and the socket.
// Where the connection has a writewait.Writer (TCP on Linux), the request is written
// through it, so that the worker waits for the answer without a read that finds nothing.

// answerBufferSize is the size of a worker's read buffer: an engine's whole answer, as a
// vLLM /metrics text (10-20 KiB), is taken from the socket in one read when it has
// arrived.
const answerBufferSize = 32 << 10

// errAborted fails an exchange on a connection whose target was dropped.
var errAborted = errors.New("scrape abandoned")

// engineConn is one target's connection to its engine, kept from one flight to the next.
//
// Synchronisation model: the worker running the target's flight uses conn and reads it
// without locking, since no one else writes it; the goroutine running Start may call
// abort at any time. mu guards conn's writes, aborted and cancelDial against abort.
type engineConn struct {
	// address is the engine's host:port.
	address string
	// metricsRequest and modelsRequest are the scrape's and the listing's requests,
	// ready to write.
	metricsRequest, modelsRequest []byte

	mu   sync.Mutex
	conn net.Conn // nil until dialed, and after a failed exchange
	// writer writes conn's requests and waits for their answers; nil where it cannot.
	writer *writewait.Writer
	// aborted reports that the target was dropped: its connection is closed and no other
	// is dialed.
	aborted bool
	// cancelDial cancels the dial in progress; nil when there is none.
	cancelDial context.CancelFunc
}

// newEngineConn returns the (not yet dialed) connection to the engine at address.
func newEngineConn(address string) *engineConn {
	request := func(path, accept string) []byte {
		return []byte("GET " + path + " HTTP/1.1\r\nHost: " + address +
			"\r\nUser-Agent: switchboard-scraper\r\nAccept: " + accept + "\r\n\r\n")
	}
	return &engineConn{
		address: address,
		// The classic text format is what ParseMetrics reads. No Accept-Encoding: engines
		// are on the cluster network, and decompressing would cost more than parsing.
		metricsRequest: request("/metrics", "text/plain;version=0.0.4"),
		modelsRequest:  request("/v1/models", "application/json"),
	}
}

// abort closes the connection, which fails an exchange in progress at once, cancels a
// dial in progress and keeps any other from being dialed.
func (ec *engineConn) abort() {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	ec.aborted = true
	if ec.cancelDial != nil {
		ec.cancelDial()
	}
	if ec.conn != nil {
		_ = ec.conn.Close()
	}
}

// isAborted reports whether abort was called.
func (ec *engineConn) isAborted() bool {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	return ec.aborted
}

// close closes the connection, if any; the next exchange dials another.
func (ec *engineConn) close() {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	if ec.conn != nil {
		_ = ec.conn.Close()
		ec.conn, ec.writer = nil, nil
	}
}

// scrapeWorker is what one worker goroutine keeps from one flight to the next.
type scrapeWorker struct {
	s *Scraper
	// ctx is Start's: it bounds dials and carries the logger.
	ctx context.Context
	// br reads the answers; it is reset onto the connection of every exchange, as each
	// exchange reads its answer to the end.
	br *bufio.Reader
	// body caps the /metrics body being parsed.
	body cappedReader
}

// connect returns ec's connection, dialing one that expires at deadline if it has none,
// and whether it was kept from an earlier exchange.
func (w *scrapeWorker) connect(ec *engineConn, deadline time.Time) (c net.Conn, kept bool, err error) {
	if ec.conn != nil {
		return ec.conn, true, nil
	}
	ec.mu.Lock()
	if ec.aborted {
		ec.mu.Unlock()
		return nil, false, errAborted
	}
	ctx, cancel := context.WithDeadline(w.ctx, deadline)
	defer cancel()
	ec.cancelDial = cancel
	ec.mu.Unlock()

	c, err = w.s.dial(ctx, "tcp", ec.address)

	ec.mu.Lock()
	defer ec.mu.Unlock()
	ec.cancelDial = nil
	if err == nil && ec.aborted {
		_ = c.Close()
		err = errAborted
	}
	if err != nil {
		return nil, false, err
	}
	ec.conn, ec.writer = c, writewait.ForConn(c)
	return c, false, nil
}

// exchange writes request on ec's connection and reads the head of the answer, all
// within Timeout. A kept connection that fails before the answer begins, typically
// because the engine closed it while idle, is replaced by a new one, once, as
// http.Transport does. The caller reads the body and then calls release.
func (w *scrapeWorker) exchange(ec *engineConn, request []byte) (*http.Response, error) {
	deadline := time.Now().Add(w.s.opts.Timeout)
	for {
		c, kept, err := w.connect(ec, deadline)
		if err != nil {
			return nil, err
		}
		if err = c.SetDeadline(deadline); err == nil {
			w.br.Reset(c)
			if err = send(c, ec.writer, request); err == nil {
				_, err = w.br.Peek(1)
			}
		}
		if err == nil {
			resp, err := h1resp.ReadResponse(w.br, nil)
			if err != nil {
				ec.close()
			}
			return resp, err
		}
		ec.close()
		if !kept || errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, err
		}
	}
}

// send writes request on c: through writer, which then waits for the answer, where c
// has one, and the rest, if any, the ordinary way.
func send(c net.Conn, writer *writewait.Writer, request []byte) error {
	sent, err := writer.WriteAndWait(request, nil)
	if err == nil && sent < len(request) {
		_, err = c.Write(request[sent:])
	}
	return err
}

// release ends the exchange that resp answers: the connection is kept for the next one
// if the body was read to its end (give or take a few KiB, which release reads) and the
// engine did not ask to close it; it is closed otherwise.
func (w *scrapeWorker) release(ec *engineConn, resp *http.Response) {
	if _, err := io.CopyN(io.Discard, resp.Body, 4<<10); err != io.EOF || resp.Close || w.br.Buffered() > 0 {
		ec.close()
	}
}
