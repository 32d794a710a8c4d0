package stripe

import "net/http"

// NewClientOver is NewClient sending each attempt through base instead of
// a network transport (an in-process one, for a testing/synctest bubble).
func NewClientOver(cfg Config, base http.RoundTripper) (*Client, error) {
	return newClient(cfg, base)
}
