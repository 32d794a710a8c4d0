package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// usageSeeds are FuzzParseUsage's seed bodies; TestUsageSeedsAsDocumented
// sends each through the app API too.
var usageSeeds = []string{
	`{"idempotency_key": "k", "amount": 1}`,
	`{"amount": 9223372036854775807, "idempotency_key": "order-42"}`,
	`{"idempotency_key": "k", "amount": 0}`,
	`{"idempotency_key": "k", "amount": -1}`,
	`{"idempotency_key": "k", "amount": 1.5}`,
	`{"idempotency_key": "k", "amount": 1e3}`,
	`{"idempotency_key": "a\u0000b", "amount": 1}`,
	`{"idempotency_key": "\ud800", "amount": 1}`,
	`{"idempotency_key": "` + strings.Repeat("x", 256) + `", "amount": 1}`,
	`{"idempotency_key": "k", "amount": 1} {}`,
	`{"idempotency_key": "k", "amount": 1, "x": 2}`,
	`{"IDEMPOTENCY_KEY": "k", "Amount": 1}`,
	`{"idempotency_key": "k", "idempotency_key": "j", "amount": 1}`,
	`null`, `[]`, `"k"`, ``, `{`, "\xff",
	`{"idempotency_key": "k", "amount": 1}` + strings.Repeat(" ", MaxUsageBodyBytes),
}

// FuzzParseUsage: whatever the body, parseUsage either refuses it as
// invalid (400) or too large (413), or returns a debit that passes
// Validate and holds exactly the body's key and amount.
func FuzzParseUsage(f *testing.F) {
	for _, seed := range usageSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := parseUsage(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), MaxUsageBodyBytes), "u1", "")
		if err != nil {
			var tooLarge *http.MaxBytesError
			require.True(t, errors.Is(err, reconcile.ErrInvalid) || errors.As(err, &tooLarge), "%v", err)
			if !errors.As(err, &tooLarge) {
				require.Equal(t, http.StatusBadRequest, failureOf(err).code)
			}
			return
		}
		require.LessOrEqual(t, len(body), MaxUsageBodyBytes)
		// What the API promises, said again apart from Validate.
		require.True(t, len(d.Key) >= 1 && len(d.Key) <= 255, "key of %d bytes", len(d.Key))
		require.NotContains(t, d.Key, "\x00")
		require.True(t, utf8.ValidString(d.Key))
		require.Positive(t, d.Amount)
		require.NoError(t, d.Validate())
		require.Equal(t, "u1", d.UserRef)
		// The body names its members exactly as documented (encoding/json
		// alone would match them regardless of case)...
		var members map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(bytes.TrimSpace(body), &members))
		for name := range members {
			require.Contains(t, []string{"idempotency_key", "amount"}, name)
		}
		// ...and the key and amount are the body's.
		var m struct {
			IdempotencyKey string `json:"idempotency_key"`
			Amount         int64  `json:"amount"`
		}
		require.NoError(t, json.Unmarshal(bytes.TrimSpace(body), &m))
		require.Equal(t, m.IdempotencyKey, d.Key)
		require.Equal(t, m.Amount, d.Amount)
	})
}

// TestParseUsageBodyCutShort: a body the client never finished is the
// client's failure (400, counted as client_error), not a bad request.
func TestParseUsageBodyCutShort(t *testing.T) {
	body := io.MultiReader(strings.NewReader(`{"idempotency_key": "k", "am`), iotest.ErrReader(io.ErrUnexpectedEOF))
	_, err := parseUsage(body, "u1", "")
	require.ErrorIs(t, err, errIncompleteBody)
	require.NotErrorIs(t, err, reconcile.ErrInvalid)
	f := failureOf(err)
	require.Equal(t, http.StatusBadRequest, f.code)
	require.Equal(t, "client_error", f.answer)
}
