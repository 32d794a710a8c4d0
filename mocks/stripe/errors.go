package stripe

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	typeInvalidRequest = "invalid_request_error"
	typeAPI            = "api_error"
)

// stripeError is an error answered in Stripe's shape:
// {"error":{"type":…,"code":…,"message":…,"param":…}}.
type stripeError struct {
	status     int
	retryAfter time.Duration // sets Retry-After on 429s
	// limitedReason sets Stripe-Rate-Limited-Reason on the limiters' 429s.
	limitedReason string
	Type          string
	Code          string
	Message       string
	Param         string
}

func (e *stripeError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.Type, e.Message) }

func (e *stripeError) body() []byte {
	inner := obj{"type": e.Type, "message": e.Message}
	if e.Code != "" {
		inner["code"] = e.Code
		// Stripe's pages are hyphenated: rate_limit → error-codes/rate-limit.
		inner["doc_url"] = "https://stripe.com/docs/error-codes/" + strings.ReplaceAll(e.Code, "_", "-")
	}
	if e.Param != "" {
		inner["param"] = e.Param
	}
	b, _ := json.MarshalIndent(obj{"error": inner}, "", "  ")
	return b
}

func (e *stripeError) write(w http.ResponseWriter) {
	if e.limitedReason != "" {
		w.Header().Set("Stripe-Rate-Limited-Reason", e.limitedReason)
	}
	if e.retryAfter > 0 {
		secs := int(math.Ceil(e.retryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	writeJSON(w, e.status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// noSuch is Stripe's answer for an unknown id: 404 when the id is in the
// path, 400 when it is a parameter of the request.
func noSuch(noun, id, param string) *stripeError {
	status := http.StatusBadRequest
	if param == "id" {
		status = http.StatusNotFound
	}
	return &stripeError{status: status, Type: typeInvalidRequest, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", noun, id)}
}

func missingParam(name string) *stripeError {
	return &stripeError{status: 400, Type: typeInvalidRequest, Code: "parameter_missing", Param: name,
		Message: "Missing required param: " + name + "."}
}

func invalidParam(name, msg string) *stripeError {
	return &stripeError{status: 400, Type: typeInvalidRequest, Code: "parameter_invalid", Param: name, Message: msg}
}

func badRequest(msg string) *stripeError {
	return &stripeError{status: 400, Type: typeInvalidRequest, Message: msg}
}
