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
