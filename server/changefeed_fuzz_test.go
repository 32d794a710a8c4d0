package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// feedQuerySeeds are FuzzFeedQuery's seed queries and the status each
// gets.
var feedQuerySeeds = map[string]int{
	"":                             http.StatusOK,
	"after=748-12&limit=2&wait=0s": http.StatusOK,
	"limit=1000&wait=60s":          http.StatusOK,
	"limit=%31":                    http.StatusOK, // 1, encoded
	"after=&limit=":                http.StatusOK, // empty: the defaults
	"other=1&after=1-2":            http.StatusOK, // others are ignored
	"after=9223372036854775807-9223372036854775807": http.StatusOK,
	"after=9223372036854775808-1":                   http.StatusBadRequest, // beyond a bigint
	"after=18446744073709551615-1":                  http.StatusBadRequest,
	"after=1-2-3":                                   http.StatusBadRequest,
	"after=%zz":                                     http.StatusBadRequest, // Go's URL.Query would drop it: from the start
	"after=1-2;limit=5":                             http.StatusBadRequest,
	"limit=1&limit=2":                               http.StatusBadRequest,
	"after=1-2&after=3-4":                           http.StatusBadRequest,
	"limit=0":                                       http.StatusBadRequest,
	"limit=1001":                                    http.StatusBadRequest,
	"limit=99999999999999999999":                    http.StatusBadRequest,
	"limit=1.5":                                     http.StatusBadRequest,
	"limit= 5":                                      http.StatusBadRequest,
	"wait=61s":                                      http.StatusBadRequest,
	"wait=-1ns":                                     http.StatusBadRequest,
	"wait=1e400s":                                   http.StatusBadRequest,
	"wait=9223372036854775807ns":                    http.StatusBadRequest,
	"wait=30":                                       http.StatusBadRequest,
	"wait=%00":                                      http.StatusBadRequest,
}

// oneChangeFeed answers every read with one change and records what it
// was asked. Its AppStore is never called here.
type oneChangeFeed struct {
	AppStore
	after reconcile.ChangeCursor
	limit int
}

func (f *oneChangeFeed) Changes(_ context.Context, after reconcile.ChangeCursor, limit int) ([]reconcile.ChangeFeedEntry, error) {
	f.after, f.limit = after, limit
	return []reconcile.ChangeFeedEntry{{Body: []byte(`{"id":1}`), Cursor: reconcile.ChangeCursor{XID: 1, ID: 1}}}, nil
}

// FuzzFeedQuery: whatever the query, GET /api/changes answers 200 with
// the change feed read at a limit of 1…MaxChangeFeedLimit and the query's own cursor
// and limit, or 400 with a message; never a 500 or a panic.
func FuzzChangeFeedQuery(f *testing.F) {
	for q := range feedQuerySeeds {
		f.Add(q)
	}
	feed := &oneChangeFeed{}
	h := New(Config{App: App{Token: "app-token-0123456789abcdef", Store: feed, ChangeFeed: feed}})
	f.Fuzz(func(t *testing.T, raw string) {
		*feed = oneChangeFeed{}
		r := httptest.NewRequest(http.MethodGet, "/api/changes", nil)
		r.URL.RawQuery = raw
		r.Header.Set("Authorization", "Bearer app-token-0123456789abcdef")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), w.Body.String())
		if want, ok := feedQuerySeeds[raw]; ok {
			require.Equal(t, want, w.Code, "%q: %s", raw, w.Body.String())
		}
		switch w.Code {
		case http.StatusBadRequest:
			require.NotEmpty(t, body["error"], raw)
			require.Zero(t, feed.limit, "a refused query reads nothing")
		case http.StatusOK:
			q, err := url.ParseQuery(raw)
			require.NoError(t, err, "a query that is not URL-encoded is refused")
			require.True(t, feed.limit >= 1 && feed.limit <= MaxChangeFeedLimit, "limit %d", feed.limit)
			if v := q.Get("limit"); v != "" {
				n, err := strconv.Atoi(v)
				require.NoError(t, err)
				require.Equal(t, n, feed.limit)
			} else {
				require.Equal(t, DefaultChangeFeedLimit, feed.limit)
			}
			want, err := reconcile.ParseChangeCursor(q.Get("after"))
			require.NoError(t, err)
			require.Equal(t, want, feed.after)
			require.Equal(t, "1-1", body["next"])
		default:
			t.Fatalf("%q: %d %s", raw, w.Code, w.Body.String())
		}
	})
}
