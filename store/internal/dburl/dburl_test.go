package dburl

import "testing"

func TestHas(t *testing.T) {
	for s, want := range map[string]bool{
		"postgres://u@h/db?pool_max_conns=8":          true,
		"postgresql://u@h/db?sslmode=disable":         false,
		"postgres://u@h/pool_max_conns":               false,
		"host=/tmp dbname=x pool_max_conns=8":         true,
		"host=/tmp dbname=pool_max_conns":             false,
		"host=/tmp application_name=pool_max_conns=3": false,
		"": false,
	} {
		if got := Has(s, "pool_max_conns"); got != want {
			t.Errorf("Has(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestWithParam(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h/db", "postgres://u@h/db?default_query_exec_mode=exec"},
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?default_query_exec_mode=exec&sslmode=disable"},
		{"postgresql://u@h/db?default_query_exec_mode=cache_statement", "postgresql://u@h/db?default_query_exec_mode=exec"},
		{"host=/tmp dbname=x", "host=/tmp dbname=x default_query_exec_mode=exec"},
	} {
		got := WithParam(c.in, "default_query_exec_mode", "exec")
		if got != c.want {
			t.Errorf("WithParam(%q) = %q, want %q", c.in, got, c.want)
		}
		if !Has(got, "default_query_exec_mode") {
			t.Errorf("Has(WithParam(%q)) = false", c.in)
		}
	}
}
