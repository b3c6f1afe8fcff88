package extproc

import (
	"context"
	"errors"
	"net/http"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// streamedChunk bounds a body chunk the Server streams back in FULL_DUPLEX_STREAMED mode,
// as Envoy recommends.
const streamedChunk = 64 << 10

// routeMutation sets DestinationEndpointHeader to endpoints, overwriting any a client
// sent, and clears the route cache so that the data plane routes on it.
func routeMutation(endpoints string) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
			Header:       &corev3.HeaderValue{Key: DestinationEndpointHeader, RawValue: []byte(endpoints)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}}},
		ClearRouteCache: true,
	}
}

// destinationMetadata is the dynamic metadata carrying endpoints, the same value as the
// header.
func destinationMetadata(endpoints string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationEndpointNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationEndpointHeader: structpb.NewStringValue(endpoints),
		}}),
	}}
}

// subsetHint returns the endpoints of the request's subset hint, nil when it has none. A
// hint whose value is not a list of strings allows no endpoint.
func subsetHint(md *corev3.Metadata) map[string]bool {
	v, ok := md.GetFilterMetadata()[SubsetHintNamespace].GetFields()[SubsetHintKey]
	if !ok {
		return nil
	}
	subset := make(map[string]bool)
	for _, e := range v.GetListValue().GetValues() {
		if s := strings.TrimSpace(e.GetStringValue()); s != "" {
			subset[s] = true
		}
	}
	return subset
}

// servedEndpoint returns the endpoint the data plane says served, empty if it says none.
func servedEndpoint(md *corev3.Metadata) string {
	v := md.GetFilterMetadata()[DestinationEndpointNamespace].GetFields()[DestinationEndpointServedKey]
	return strings.TrimSpace(v.GetStringValue())
}

// headersResponse answers request (or response) headers with common, nil for CONTINUE.
func headersResponse(request bool, common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	h := &extprocv3.HeadersResponse{Response: common}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: h}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: h}}
}

// bodyResponse answers a request (or response) body message with common, nil for
// CONTINUE.
func bodyResponse(request bool, common *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	b := &extprocv3.BodyResponse{Response: common}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: b}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: b}}
}

// streamedBodyResponse passes chunk on in FULL_DUPLEX_STREAMED mode.
func streamedBodyResponse(request bool, chunk []byte, endOfStream bool) *extprocv3.ProcessingResponse {
	return bodyResponse(request, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
			Body: chunk, EndOfStream: endOfStream,
		}},
	}})
}

// streamBack returns the request body answers of FULL_DUPLEX_STREAMED mode that pass body
// on in chunks; the last one ends the body when endOfStream.
func streamBack(body []byte, endOfStream bool) []*extprocv3.ProcessingResponse {
	var resps []*extprocv3.ProcessingResponse
	for {
		n := min(len(body), streamedChunk)
		last := n == len(body)
		resps = append(resps, streamedBodyResponse(true, body[:n], last && endOfStream))
		if last {
			return resps
		}
		body = body[n:]
	}
}

// trailersResponse answers request (or response) trailers with CONTINUE.
func trailersResponse(request bool) *extprocv3.ProcessingResponse {
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// httpHeader converts Envoy's header map; each entry carries its value in either Value or
// RawValue.
func httpHeader(m *corev3.HeaderMap) http.Header {
	h := make(http.Header, len(m.GetHeaders()))
	for _, hv := range m.GetHeaders() {
		h.Add(hv.GetKey(), valueOf(hv))
	}
	return h
}

// valueOf returns hv's value: its raw value, which Envoy sends, or else its value.
func valueOf(hv *corev3.HeaderValue) string {
	if raw := hv.GetRawValue(); len(raw) > 0 {
		return string(raw)
	}
	return hv.GetValue()
}

// headerValue returns the value of the header name (lower case, as the data plane sends
// names) in m, "" when m has none.
func headerValue(m *corev3.HeaderMap, name string) string {
	for _, hv := range m.GetHeaders() {
		if hv.GetKey() == name {
			return valueOf(hv)
		}
	}
	return ""
}

// errorResponse answers err with an immediate response: the status and message of an
// error carrying an HTTP status, else 500 with a generic message (err is logged).
func errorResponse(ctx context.Context, err error) *extprocv3.ProcessingResponse {
	code, message := http.StatusInternalServerError, "internal error while picking an endpoint"
	if se, ok := errors.AsType[httpStatusError](err); ok && se.HTTPStatus() >= 400 && se.HTTPStatus() <= 599 {
		code, message = se.HTTPStatus(), err.Error()
		log.FromContext(ctx).V(1).Info("Request rejected", "status", code, "reason", message)
	} else {
		log.FromContext(ctx).Error(err, "Endpoint pick failed")
	}

	w := newRecordedResponse()
	if hs, ok := errors.AsType[headerSetter](err); ok {
		hs.SetHeaders(w.header)
	}
	writeError(w, code, message)
	mutation := &extprocv3.HeaderMutation{}
	for key, values := range w.header {
		for _, v := range values {
			mutation.SetHeaders = append(mutation.SetHeaders, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: strings.ToLower(key), RawValue: []byte(v)},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(w.status)},
			Headers: mutation,
			Body:    w.body.Bytes(),
		},
	}}
}

// httpStatusError is an error that says which HTTP status answers it.
type httpStatusError interface {
	error
	HTTPStatus() int
}

// headerSetter is an error whose answer carries headers, such as Retry-After.
type headerSetter interface {
	error
	SetHeaders(http.Header)
}

// statusError is an httpStatusError raised by the Server itself.
type statusError struct {
	status  int
	message string
}

func (e *statusError) Error() string   { return e.message }
func (e *statusError) HTTPStatus() int { return e.status }
