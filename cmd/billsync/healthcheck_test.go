package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.Path)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	check := func() error {
		var out bytes.Buffer
		return run(context.Background(), []string{"healthcheck", "-addr", addr}, &out, &out)
	}

	require.NoError(t, check(), "200 from /readyz is ready")
	status = http.StatusServiceUnavailable
	require.ErrorContains(t, check(), "503", "a 503 from /readyz is not ready")
	require.Equal(t, []string{"GET /readyz", "GET /readyz"}, asked)
	srv.Close()
	require.ErrorContains(t, check(), "not ready", "nobody listening is not ready")
}

func TestReadyURL(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:8080":   "http://127.0.0.1:8080/readyz",
		"[::]:8080":      "http://127.0.0.1:8080/readyz",
		":9090":          "http://127.0.0.1:9090/readyz",
		"10.0.0.7:8080":  "http://10.0.0.7:8080/readyz",
		"127.0.0.1:8080": "http://127.0.0.1:8080/readyz",
		"localhost:80":   "http://localhost:80/readyz",
	} {
		got, err := readyURL(addr)
		require.NoError(t, err, addr)
		require.Equal(t, want, got, addr)
	}
	for _, bad := range []string{"8080", "host:", ""} {
		_, err := readyURL(bad)
		require.Error(t, err, bad)
	}
}
