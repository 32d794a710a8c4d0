// Package inproc serves a client's HTTP requests with an http.Handler in
// the calling goroutine, without a network: a client under test then runs
// inside a testing/synctest bubble, whose fake clock makes its rate
// limiters, backoffs and deadlines exact instead of racing a busy machine
// (a loopback connection does not work in a bubble: its reads never count
// as durably blocked).
//
// It is for tests only: nothing in billsync's product path may import it.
package inproc

import (
	"net/http"
	"net/http/httptest"
)

// Transport is an http.RoundTripper that answers each request with
// Handler, as a server would: the handler sees the request with a Host, a
// RequestURI and a non-nil Body, and its context ends when the client's
// does.
type Transport struct {
	Handler http.Handler
}

// RoundTrip serves req with t.Handler and returns its recorded answer.
func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close() // a RoundTripper closes the request's body
	}
	in := req.Clone(req.Context())
	in.Host = req.URL.Host
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "192.0.2.1:1234" // TEST-NET-1: no real peer
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.Handler.ServeHTTP(rec, in)
	if err := req.Context().Err(); err != nil {
		return nil, err // the client gave up while the handler ran
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
