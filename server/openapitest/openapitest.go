// Package openapitest checks the admin and app APIs against their OpenAPI
// document (server/openapi.yaml) from the client's side: every API test
// sends its requests through Client or Transport, so a route, a status or
// a field the document does not describe fails the test that met it.
//
// It is for tests only (a depguard rule keeps it, and kin-openapi, out of
// the binary).
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/billsync/billsync/server"
)

// Covered reports whether the document describes path's API: the admin
// API and the app API (everything under /api/). The webhooks, health,
// metrics and the console's pages are not in it.
func Covered(path string) bool {
	return strings.HasPrefix(path, "/admin/api/") || strings.HasPrefix(path, "/api/")
}

// Doc returns the loaded and validated document.
var Doc = sync.OnceValues(func() (*openapi3.T, error) {
	// A plain loader: the document has no external $ref. kin-openapi reads
	// "openapi: 3.1.0" and then validates the document, and later the
	// bodies, as JSON Schema 2020-12 (type arrays such as [string, "null"]).
	doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("load server/openapi.yaml: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("server/openapi.yaml is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("server/openapi.yaml is not valid OpenAPI 3.1: %w", err)
	}
	return doc, nil
})

var router = sync.OnceValues(func() (routers.Router, error) {
	doc, err := Doc()
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc)
})

// Client returns an HTTP client whose every request and answer on the
// APIs is checked (see Transport).
func Client() *http.Client { return &http.Client{Transport: Transport(http.DefaultTransport)} }

// Transport wraps next so that a request to the admin or app API and its
// answer are checked against the document; a mismatch is the round
// trip's error, naming what the document lacks. The rules:
//   - a request the document has no route for must be answered 404 or 405
//     (the mux's own answer): a route missing from the document fails;
//   - a request the document calls invalid (a wrong token, a bad body or
//     id: the tests send those on purpose) must be answered with a 4xx,
//     and that answer must be one the operation documents;
//   - any other answer must be documented: its status, headers, content
//     type and body (the schemas forbid fields they do not name).
func Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper{next}
}

type roundTripper struct{ next http.RoundTripper }

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if !Covered(req.URL.Path) {
		return rt.next.RoundTrip(req)
	}
	r, err := router()
	if err != nil {
		return nil, err
	}
	var reqBody []byte
	if req.Body != nil {
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err := check(r, req, reqBody, resp, respBody); err != nil {
		return nil, fmt.Errorf("openapi: %s %s answered %d %q: %w", req.Method, req.URL.RequestURI(), resp.StatusCode, respBody, err)
	}
	return resp, nil
}

func check(r routers.Router, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	// A copy for the validator, with the body it will read.
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := r.FindRoute(vreq)
	if err != nil {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return nil
		}
		return fmt.Errorf("no route in server/openapi.yaml: %w", err)
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			// The server checks the token; the document says which
			// scheme. A missing or wrong one must get a documented 401.
			AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
			IncludeResponseStatus: true,
			MultiError:            true,
		}}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if sec := route.Operation.Security; reqErr == nil && req.Header.Get("Authorization") == "" && sec != nil && len(*sec) > 0 && len((*sec)[0]) > 0 {
		reqErr = errors.New("no Authorization header")
	}
	if reqErr != nil && (resp.StatusCode < 400 || resp.StatusCode >= 500) {
		return fmt.Errorf("the document calls the request invalid, yet the answer is not a 4xx: %w", reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: in.Options}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("answer not as documented: %w", err)
	}
	return nil
}
