package stripe

import "net/http"

// Usage is what the API was asked, by operation (the route pattern, as in
// Limits.Operations). Requests are the requests the limiters let through
// (answered by the API, whatever the answer); RateLimited are those the
// limiters refused, by Stripe-Rate-Limited-Reason. Reads are the GETs let
// through: Stripe's read allocation counts them, not writes. Requests
// without a valid key are not counted.
type Usage struct {
	Operations  map[string]OperationUsage `json:"operations"`
	Requests    int64                     `json:"requests"`
	Reads       int64                     `json:"reads"`
	Writes      int64                     `json:"writes"`
	RateLimited int64                     `json:"rate_limited"`
}

// OperationUsage is one operation's share of Usage.
type OperationUsage struct {
	Requests    int64            `json:"requests"`
	Reads       int64            `json:"reads"`
	Writes      int64            `json:"writes"`
	RateLimited map[string]int64 `json:"rate_limited,omitempty"`
}

func (u *Usage) add(o Usage) {
	if u.Operations == nil {
		u.Operations = map[string]OperationUsage{}
	}
	for op, ou := range o.Operations {
		sum := u.Operations[op]
		sum.Requests += ou.Requests
		sum.Reads += ou.Reads
		sum.Writes += ou.Writes
		for reason, n := range ou.RateLimited {
			if sum.RateLimited == nil {
				sum.RateLimited = map[string]int64{}
			}
			sum.RateLimited[reason] += n
		}
		u.Operations[op] = sum
	}
	u.Requests += o.Requests
	u.Reads += o.Reads
	u.Writes += o.Writes
	u.RateLimited += o.RateLimited
}

// count records a request made with key (in its account) for op: let
// through when reason is "", else refused for reason. Called with g.mu
// held.
func (g *gate) count(key usageKey, method, op, reason string) {
	u := g.usage[key]
	if u == nil {
		u = &Usage{Operations: map[string]OperationUsage{}}
		g.usage[key] = u
	}
	ou := u.Operations[op]
	switch {
	case reason != "":
		if ou.RateLimited == nil {
			ou.RateLimited = map[string]int64{}
		}
		ou.RateLimited[reason]++
		u.RateLimited++
	case method == http.MethodGet:
		ou.Requests++
		ou.Reads++
		u.Requests++
		u.Reads++
	default:
		ou.Requests++
		ou.Writes++
		u.Requests++
		u.Writes++
	}
	u.Operations[op] = ou
}

// usageOf sums the usage of keys, in every account; no keys: of every key.
func (g *gate) usageOf(keys ...string) Usage {
	return g.usageWhere(func(k usageKey) bool { return len(keys) == 0 || contains(keys, k.key) })
}

// accountUsage sums every key's usage in account ("": the platform).
func (g *gate) accountUsage(account string) Usage {
	return g.usageWhere(func(k usageKey) bool { return k.account == account })
}

func (g *gate) usageWhere(keep func(usageKey) bool) Usage {
	g.mu.Lock()
	defer g.mu.Unlock()
	sum := Usage{Operations: map[string]OperationUsage{}}
	for key, u := range g.usage {
		if keep(key) {
			sum.add(*u)
		}
	}
	return sum
}

func (g *gate) resetUsage() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.usage = map[usageKey]*Usage{}
}

// Usage returns the API requests counted since the fake started or was
// last reset, every key's together.
func (s *Server) Usage() Usage { return s.gate.usageOf() }

// KeyUsage returns the API requests made with key: billsync's own, apart
// from a test driver's.
func (s *Server) KeyUsage(key string) Usage { return s.gate.usageOf(key) }

// ResetUsage starts the counts again from zero.
func (s *Server) ResetUsage() { s.gate.resetUsage() }
