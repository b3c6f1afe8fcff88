package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/switchboard-llm/switchboard/internal/httpfilter"
	"github.com/switchboard-llm/switchboard/internal/routing"
)

// upgradeProtocol returns the protocol an HTTP/1.1 request asks to switch to (its
// Upgrade header, such as websocket, when its Connection header names upgrade), or "".
func upgradeProtocol(r *http.Request) string {
	if !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
		return ""
	}
	return r.Header.Get("Upgrade")
}

// upgradedBody is the connection of a backend that switched protocols: the response
// body of a 101 answer, which the relay writes to as well as reads. Closing it ends the
// round trip's context.
type upgradedBody struct {
	*cancelOnClose
	io.Writer
}

// relayUpgrade completes a protocol switch the backend accepted (101, such as a
// WebSocket handshake): it writes the answer's head to the client, with the rule's and
// the backend's response filters, then copies bytes both ways between the client's
// connection and the backend's until either side closes, and releases the reservation.
func (x *exchange) relayUpgrade(target *routing.Target, resp *http.Response, backend *httpfilter.Chain) {
	defer target.Release(0)
	defer resp.Body.Close()
	up, ok := resp.Body.(io.ReadWriter)
	if !ok {
		x.o.fail(x.w, x.r, errInternal("The backend switched protocols on a connection that cannot be written to."))
		return
	}
	client, buffered, err := http.NewResponseController(x.w).Hijack()
	if err != nil {
		// HTTP/2 requests cannot switch protocols this way.
		x.o.fail(x.w, x.r, errInternal("The client's connection cannot switch protocols: "+err.Error()))
		return
	}
	defer client.Close()
	h := resp.Header.Clone()
	h[HeaderEndpoint] = target.Pod.IDHeader()
	h[HeaderRequestID] = x.o.requestID
	x.matched.Rule.Filters.ModifyResponse(h)
	backend.ModifyResponse(h)
	var head strings.Builder
	fmt.Fprintf(&head, "HTTP/1.1 %s\r\n", resp.Status)
	_ = h.Write(&head)
	head.WriteString("\r\n")
	if _, err := buffered.WriteString(head.String()); err != nil {
		return
	}
	if err := buffered.Flush(); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, buffered) // what the client sends, including bytes already read
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, up)
		done <- struct{}{}
	}()
	<-done
	// One side is done: closing both (deferred) ends the other copy.
	_ = client.Close()
	_ = resp.Body.Close()
	<-done
}
