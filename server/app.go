package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/billsync/billsync/reconcile"
)

// AppStore is what the app API reads and writes (store.Store implements it).
type AppStore interface {
	// UserAccount answers the user userRef, of provider and of account
	// (a connected account's acct_ id, or reconcile.PlatformAccount) when
	// not empty.
	UserAccount(ctx context.Context, userRef, provider, account string) (reconcile.UserAccount, error)
	// Debit writes what decide (reconcile.DecideDebit) makes of d under
	// the account's row lock.
	Debit(ctx context.Context, d reconcile.Debit, decide func(reconcile.Debit, reconcile.DebitState) (reconcile.DebitResult, error)) (reconcile.DebitResult, error)
}

// ChangeFeed is what GET /api/changes reads (store.Store implements it).
type ChangeFeed interface {
	Changes(ctx context.Context, after reconcile.ChangeCursor, limit int) ([]reconcile.ChangeFeedEntry, error)
}

// App configures the app-facing API, /api/users/…: the app reads a user's
// plan and balance and spends its allowance, addressed by its own user id
// (the account's user_ref), and follows the change feed, /api/changes.
// Without a Token its routes do not exist (404).
type App struct {
	Token string
	Store AppStore
	// Plans declares the features the app may ask about (nil: none).
	Plans *reconcile.Plans
	// ChangeFeed serves /api/changes (absent when nil); Committed fires when a
	// change commits (the store's LISTEN), waking long polls, which also
	// look again every ChangeFeedPoll (default 1 s) in case a wake-up is lost.
	ChangeFeed     ChangeFeed
	Committed      *reconcile.Signal
	ChangeFeedPoll time.Duration
	// Imports, when set, makes the 404 for an unknown user say so while
	// the import of one of Providers (the configured ones) has not
	// completed: ImportHeader and the imports' progress (docs/app-api.md).
	// The state read is reused for ImportStateTTL (default
	// DefaultImportStateTTL).
	Imports        ImportStates
	Providers      []string
	ImportStateTTL time.Duration
	// Stopping closes when the server starts to shut down: a long poll
	// then answers at once with the cursor it was given (nothing came),
	// rather than hold a graceful stop for the rest of its wait.
	Stopping <-chan struct{}
}

// Change feed limits: a page holds at most MaxChangeFeedLimit changes, and a
// long poll waits at most MaxChangeFeedWait.
const (
	DefaultChangeFeedLimit = 100
	MaxChangeFeedLimit     = 1000
	MaxChangeFeedWait      = 60 * time.Second
)

// MaxUsageBodyBytes bounds a usage request's body: it holds one key of at
// most 255 bytes and a number.
const MaxUsageBodyBytes = 4 << 10

var errAppUnauthorized = errors.New("missing or wrong app token: send Authorization: Bearer <BILLSYNC_APP_TOKEN>")

func (s *Server) routeApp(a App) {
	if a.Token == "" || a.Store == nil {
		return
	}
	authorized := bearer(a.Token)
	var imports *importWatch
	if a.Imports != nil && len(a.Providers) > 0 {
		imports = &importWatch{store: a.Imports, providers: a.Providers, ttl: cmp.Or(a.ImportStateTTL, DefaultImportStateTTL)}
	}
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			err := errAppUnauthorized
			if authorized(r) {
				err = h(w, r)
			}
			if err != nil {
				s.writeError(w, r, toAPI, err)
			}
		})
	}
	handle("GET /api/users/{user_ref}", func(w http.ResponseWriter, r *http.Request) error {
		ref, provider, account := userOf(r)
		if err := checkUser(ref, provider, account); err != nil {
			return err
		}
		u, err := a.Store.UserAccount(r.Context(), ref, provider, account)
		if err != nil {
			return imports.absent(r.Context(), err, provider)
		}
		writeJSON(w, http.StatusOK, userJSON(u, a.Plans))
		return nil
	})
	handle("GET /api/users/{user_ref}/features/{key}", func(w http.ResponseWriter, r *http.Request) error {
		ref, provider, account := userOf(r)
		if err := checkUser(ref, provider, account); err != nil {
			return err
		}
		key := r.PathValue("key")
		if _, ok := a.Plans.FeatureDef(key); !ok {
			return a.Plans.Unknown(key) // before the database: the names are the plans file's
		}
		u, err := a.Store.UserAccount(r.Context(), ref, provider, account)
		if err != nil {
			return imports.absent(r.Context(), err, provider)
		}
		check, err := a.Plans.CheckNamed(key, u)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, check)
		return nil
	})
	handle("POST /api/users/{user_ref}/usage", func(w http.ResponseWriter, r *http.Request) error {
		ref, provider, account := userOf(r)
		d, err := parseUsage(http.MaxBytesReader(w, r.Body, MaxUsageBodyBytes), ref, provider)
		if err != nil {
			return err
		}
		d.Account = account // checked with the rest by Store.Debit
		if err := a.Plans.CheckDebit(d); err != nil {
			return err
		}
		res, err := a.Store.Debit(r.Context(), d, reconcile.DecideDebit)
		if err != nil {
			return imports.absent(r.Context(), err, d.Provider)
		}
		if res.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	})
	if a.ChangeFeed != nil {
		handle("GET /api/changes", func(w http.ResponseWriter, r *http.Request) error { return a.serveChanges(w, r) })
	}
}

// userOf reads the user a /api/users/{user_ref} route names: the ref, and
// the provider and account (?provider=, ?account=) that pick among
// several accounts holding it.
func userOf(r *http.Request) (ref, provider, account string) {
	q := r.URL.Query()
	return r.PathValue("user_ref"), q.Get("provider"), q.Get("account")
}

// checkUser reports why a user cannot be looked up (ErrInvalid).
func checkUser(ref, provider, account string) error {
	if err := reconcile.CheckUserRef(ref, provider); err != nil {
		return err
	}
	return reconcile.CheckAccountParam(account)
}

// feedQuery is GET /api/changes's query: after (a cursor the feed handed
// out; none: the start), limit (1…MaxChangeFeedLimit) and wait (a Go duration,
// 0…MaxChangeFeedWait: how long to hold the request while no change is there).
type feedQuery struct {
	after reconcile.ChangeCursor
	limit int
	wait  time.Duration
}

// parseFeedQuery parses the raw query: one that is not URL-encoded, or
// names a parameter twice, is refused rather than read in part (Go's
// URL.Query drops what it cannot decode).
func parseFeedQuery(raw string) (feedQuery, error) {
	f := feedQuery{limit: DefaultChangeFeedLimit}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return f, fmt.Errorf("%w: the query is not URL-encoded: %v", reconcile.ErrInvalid, err)
	}
	for _, name := range []string{"after", "limit", "wait"} {
		if len(q[name]) > 1 {
			return f, fmt.Errorf("%w: %s is given %d times; give it once", reconcile.ErrInvalid, name, len(q[name]))
		}
	}
	if f.after, err = reconcile.ParseChangeCursor(q.Get("after")); err != nil {
		return f, err
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxChangeFeedLimit {
			return f, fmt.Errorf("%w: limit must be a whole number from 1 to %d, got %q", reconcile.ErrInvalid, MaxChangeFeedLimit, v)
		}
		f.limit = n
	}
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > MaxChangeFeedWait {
			return f, fmt.Errorf("%w: wait must be a duration from 0s to %s, like 30s, got %q", reconcile.ErrInvalid, MaxChangeFeedWait, v)
		}
		f.wait = d
	}
	return f, nil
}

// feedAnswer is GET /api/changes's answer: the changes in feed order and
// the cursor to ask after next (the one given when there is none).
type feedAnswer struct {
	Changes []json.RawMessage `json:"changes"`
	Next    string            `json:"next"`
}

func (a App) serveChanges(w http.ResponseWriter, r *http.Request) error {
	f, err := parseFeedQuery(r.URL.RawQuery)
	if err != nil {
		return err
	}
	ctx := r.Context()
	deadline := time.Now().Add(f.wait)
	if f.wait > 0 {
		// The server's write timeout would cut a long poll short.
		_ = http.NewResponseController(w).SetWriteDeadline(deadline.Add(30 * time.Second))
	}
	poll := cmp.Or(a.ChangeFeedPoll, time.Second)
	for {
		var woken <-chan struct{}
		if a.Committed != nil {
			woken = a.Committed.C() // before the read: a commit in between still wakes us
		}
		cs, err := a.ChangeFeed.Changes(ctx, f.after, f.limit)
		if err != nil {
			return err
		}
		left := time.Until(deadline)
		if len(cs) > 0 || left <= 0 {
			ans := feedAnswer{Changes: make([]json.RawMessage, len(cs)), Next: f.after.String()}
			for i, c := range cs {
				ans.Changes[i] = c.Body
				ans.Next = c.Cursor.String()
			}
			writeJSON(w, http.StatusOK, ans)
			return nil
		}
		t := time.NewTimer(min(left, poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err() // the app hung up: counted as the client's
		case <-a.Stopping:
			t.Stop()
			writeJSON(w, http.StatusOK, feedAnswer{Changes: []json.RawMessage{}, Next: f.after.String()})
			return nil
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// statusNone is the app API's status of an account with no current
// subscription: the store keeps "" for it, which an app would have to
// special-case as "unknown".
const statusNone = "none"

// userAnswer is GET /api/users/{user_ref}'s answer. Periods are null for
// an account never reconciled; Status is the provider's subscription
// status, or statusNone.
type userAnswer struct {
	AccountID  int64  `json:"account_id"`
	Provider   string `json:"provider"`
	CustomerID string `json:"customer_id"`
	// ConnectedAccount is the Stripe Connect account holding the customer
	// ("" for the platform's own: absent).
	ConnectedAccount string `json:"connected_account,omitempty"`
	// Authorization says whether that account still authorises the
	// platform (absent for the platform's own, and while billsync has
	// heard no word about the account).
	Authorization *connectedAuthorization `json:"connected_account_authorization,omitempty"`
	UserRef       string                  `json:"user_ref"`
	Plan          string                  `json:"plan"`
	Status        string                  `json:"status"`
	PeriodStart   *time.Time              `json:"period_start"`
	PeriodEnd     *time.Time              `json:"period_end"`
	Balance       int64                   `json:"balance"`
	// Features answers every feature the plans file declares, by key
	// (absent when it declares none: the answer is then as before features).
	Features map[string]reconcile.FeatureCheck `json:"features,omitempty"`
}

// connectedAuthorization is whether a connected account authorises the
// platform, as the newest word about it said (an
// account.application.authorized or .deauthorized event, or Stripe's list
// of accounts), and that word's time: since when. A deauthorised
// account's customers keep the state last read; billsync no longer reads
// them.
type connectedAuthorization struct {
	Authorized bool      `json:"authorized"`
	Since      time.Time `json:"since"`
}

func userJSON(u reconcile.UserAccount, plans *reconcile.Plans) userAnswer {
	a := u.Account
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	connected, _ := reconcile.SplitConnected(a.CustomerID)
	var auth *connectedAuthorization
	if c := u.Connected; c != nil {
		auth = &connectedAuthorization{Authorized: c.Authorized, Since: c.ChangedAt.UTC()}
	}
	return userAnswer{a.ID, a.Provider, a.CustomerID, connected, auth, a.UserRef, a.Plan, cmp.Or(a.Status, statusNone), opt(a.PeriodStart), opt(a.PeriodEnd), u.Balance,
		plans.Checks(u)}
}

// parseUsage reads a usage request's body, {"idempotency_key": "…",
// "amount": N}, and checks it; every failure wraps reconcile.ErrInvalid,
// or is an *http.MaxBytesError, or wraps errIncompleteBody (the body could
// not be read).
func parseUsage(body io.Reader, userRef, provider string) (reconcile.Debit, error) {
	var req struct {
		// Raw: encoding/json decodes invalid UTF-8 and a lone surrogate
		// (\ud800) to U+FFFD, so different keys would read as one key and
		// a later debit would be answered as the first one's replay. The
		// raw string is checked before it is decoded.
		IdempotencyKey json.RawMessage `json:"idempotency_key"`
		Amount         *int64          `json:"amount"`
		// Feature names the meter; absent or "" is the default one.
		Feature *string `json:"feature"`
	}
	// The whole body is read first: a body over the limit is refused even
	// when its first bytes are a valid request.
	b, err := io.ReadAll(body)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return reconcile.Debit{}, err
	case err != nil:
		// The client hung up or sent less than it announced: its failure,
		// counted apart from billsync's.
		return reconcile.Debit{}, fmt.Errorf("%w: %w", errIncompleteBody, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err = dec.Decode(&req); err == nil && len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		err = errors.New("data after the object")
	}
	if err == nil {
		err = exactNames(b, "idempotency_key", "amount", "feature")
	}
	switch {
	case err != nil:
		return reconcile.Debit{}, fmt.Errorf(`%w: body is not {"idempotency_key": "<1-255 bytes>", "amount": <whole number above 0>, "feature": "<a metered feature, optional>"}: %s`, reconcile.ErrInvalid, err)
	case req.IdempotencyKey == nil || string(req.IdempotencyKey) == "null":
		return reconcile.Debit{}, fmt.Errorf("%w: idempotency_key is missing", reconcile.ErrInvalid)
	case req.Amount == nil:
		return reconcile.Debit{}, fmt.Errorf("%w: amount is missing", reconcile.ErrInvalid)
	case !jsontext.Value(req.IdempotencyKey).IsValid():
		return reconcile.Debit{}, fmt.Errorf("%w: idempotency_key is not valid UTF-8 (an invalid byte, or an escape of half a surrogate pair)", reconcile.ErrInvalid)
	}
	var key string
	if err := json.Unmarshal(req.IdempotencyKey, &key); err != nil {
		return reconcile.Debit{}, fmt.Errorf(`%w: body is not {"idempotency_key": "<1-255 bytes>", "amount": <whole number above 0>}: idempotency_key: %s`, reconcile.ErrInvalid, err)
	}
	d := reconcile.Debit{UserRef: userRef, Provider: provider, Key: key, Amount: *req.Amount}
	if req.Feature != nil {
		d.Feature = *req.Feature
	}
	if err := d.Validate(); err != nil {
		return reconcile.Debit{}, err
	}
	return d, nil
}

// exactNames refuses an object member whose name is not one of names
// exactly: encoding/json matches names regardless of case, so without it
// {"IDEMPOTENCY_KEY": …} would be read as the documented field
// (server/openapi.yaml), which is case-sensitive like JSON.
func exactNames(object []byte, names ...string) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(object, &members); err != nil {
		return err
	}
	for name := range members {
		if !slices.Contains(names, name) {
			return fmt.Errorf("json: unknown field %q", name)
		}
	}
	return nil
}
