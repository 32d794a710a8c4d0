package stripe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/billsync/billsync/reconcile"
)

func signedHeader(t testing.TB, body []byte, secret string, at time.Time) http.Header {
	t.Helper()
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	h := http.Header{}
	h.Set("Stripe-Signature", p.Header)
	return h
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

func TestVerify(t *testing.T) {
	body := readFixture(t, "subscription_updated_basil.json")
	v, err := NewVerifier([]string{"whsec_old", " whsec_new "}, 0)
	require.NoError(t, err)

	t.Run("OK", func(t *testing.T) {
		for _, secret := range []string{"whsec_old", "whsec_new"} {
			d, err := v.Verify(context.Background(), signedHeader(t, body, secret, time.Now()), body)
			require.NoError(t, err, secret)
			require.Equal(t, "evt_1QbasilUpd", d.Event.DedupeKey)
			require.Equal(t, "cus_basil", d.Event.CustomerID)
			require.Equal(t, "customer.subscription.updated", d.Event.Type)
			require.Equal(t, time.Unix(1764500000, 0).UTC(), d.Event.Time)
			require.Empty(t, d.Event.IgnoreReason)
			require.Equal(t, body, d.Event.Payload)
			require.Equal(t, &reconcile.Expectation{SubscriptionID: "sub_1", Status: "active", Prices: []string{"price_pro"}},
				d.Event.Expect, "what the event's subscription says, for the worker to check its read against")
		}
	})
	bad := map[string]http.Header{
		"ErrMissingHeader": {},
		"ErrWrongSecret":   signedHeader(t, body, "whsec_other", time.Now()),
		"ErrTooOld":        signedHeader(t, body, "whsec_old", time.Now().Add(-301*time.Second)),
		"ErrGarbageHeader": {"Stripe-Signature": {"t=abc,v1=zz"}},
	}
	for name, h := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), h, body)
			require.ErrorIs(t, err, reconcile.ErrBadSignature)
		})
	}
	t.Run("ErrForgedBody", func(t *testing.T) {
		h := signedHeader(t, body, "whsec_old", time.Now())
		forged := append([]byte{}, body...)
		forged[len(forged)-3] = ' '
		_, err := v.Verify(context.Background(), h, forged)
		require.ErrorIs(t, err, reconcile.ErrBadSignature)
	})
	t.Run("OlderAPIVersionAccepted", func(t *testing.T) {
		old := readFixture(t, "invoice_paid_2024.json")
		d, err := v.Verify(context.Background(), signedHeader(t, old, "whsec_new", time.Now()), old)
		require.NoError(t, err)
		require.Equal(t, "2024-06-20", d.Event.APIVersion)
		require.Equal(t, "cus_old", d.Event.CustomerID)
	})
}

func TestNewVerifierNeedsASecret(t *testing.T) {
	_, err := NewVerifier([]string{"", " "}, 0)
	require.Error(t, err)
}

func TestParseEvent(t *testing.T) {
	tests := []struct {
		file, customer, ignore string
	}{
		{"subscription_updated_basil.json", "cus_basil", ""},
		{"invoice_paid_2024.json", "cus_old", ""},
		{"customer_deleted.json", "cus_gone", ""},
		{"charge_expanded_customer.json", "cus_expanded", ""},
		{"product_created.json", "", `event type "product.created" does not affect billing state`},
		{"thin_customer_updated.json", "cus_TbasilAda0001", ""},
		// The worker reads their customers: stored under the object.
		{"thin_subscription_updated.json", "related:subscription:sub_1RbasilPro0001", ""},
		{"thin_invoice_payment_failed.json", "related:invoice:in_1RfailedInv0002", ""},
		// A connected account's: keyed under the account (the verifier
		// decides whether it is served).
		{"thin_connect.json", "acct_1Rconnected0004/related:subscription:sub_1Rconnected0004", ""},
		{"connect_subscription_updated.json", "acct_1Rconnected0005/cus_Tconnected0005", ""},
		{"thin_v2_account.json", "", `event type "v2.core.account.updated" does not affect billing state`},
		// Accounts v2: an Account billed as a customer is keyed by its acct_ id.
		{"customer_account_subscription_updated.json", "acct_1RbilledAsCustomer1", ""},
		// Recorded by supabase/stripe-sync-engine: a trigger like any, its
		// embedded list (which stops at 10) never read.
		{"entitlement_summary_updated.json", "cus_Sll319ReSxCmEi", ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ev := ParseEvent(readFixture(t, tt.file))
			require.Equal(t, "stripe", ev.Provider)
			require.NotEmpty(t, ev.DedupeKey)
			require.Equal(t, tt.customer, ev.CustomerID)
			require.Equal(t, tt.ignore, ev.IgnoreReason)
		})
	}
	t.Run("ThinEnvelope", func(t *testing.T) {
		ev, conn := parseEvent(readFixture(t, "thin_subscription_updated.json"))
		rel, ok := reconcile.RelatedOf(ev.CustomerID)
		require.True(t, ok)
		require.Equal(t, reconcile.Related{Type: "subscription", ID: "sub_1RbasilPro0001"}, rel)
		require.Empty(t, conn.account)
		require.Equal(t, "evt_test_65thinSub0001", ev.DedupeKey)
		require.Equal(t, "v1.customer.subscription.updated", ev.Type)
		require.Equal(t, time.Date(2025, 12, 1, 10, 15, 30, 123e6, time.UTC), ev.Time, "v2 created is an RFC 3339 string")
		require.Empty(t, ev.APIVersion, "thin events are unversioned")

		ev, conn = parseEvent(readFixture(t, "thin_connect.json"))
		require.Equal(t, "acct_1Rconnected0004", conn.account)
		require.True(t, conn.testMode)
		require.Equal(t, "acct_1Rconnected0004/evt_test_65thinAcct0004", ev.DedupeKey)
		rel, ok = reconcile.RelatedOf(ev.CustomerID)
		require.True(t, ok)
		require.Equal(t, reconcile.Related{Account: "acct_1Rconnected0004", Type: "subscription", ID: "sub_1Rconnected0004"}, rel)
		for body, reason := range map[string]string{
			`{"id":"evt_a","object":"v2.core.event","type":"v1.invoice.paid","created":"yesterday","related_object":{"id":"in_1","type":"invoice"}}`:         `event time (created "yesterday") is not an RFC 3339 time within the years 2000-2200`,
			`{"id":"evt_b","object":"v2.core.event","type":"v1.invoice.paid","related_object":null}`:                                                         "thin event has no related object",
			`{"id":"evt_c","object":"v2.core.event","type":"v1.invoice.paid","related_object":{"id":"pi_1","type":"payment_intent"}}`:                        `thin event's related object is a "payment_intent", which names no customer billsync reads`,
			`{"id":"evt_d","object":"v2.core.event","type":"v1.invoice.paid","context":{"account":"org_1"},"related_object":{"id":"in_1","type":"invoice"}}`: `connected account "org_1" is not an acct_ id`,
			`{"id":"evt_e","object":"v2.core.event","type":"customer.updated","related_object":{"id":"cus_1","type":"customer"}}`:                            `event type "customer.updated" does not affect billing state`,
		} {
			ev, _ := parseEvent([]byte(body))
			require.Equal(t, reason, ev.IgnoreReason, body)
			require.Empty(t, ev.CustomerID, body)
		}
	})
	t.Run("NoCustomer", func(t *testing.T) {
		ev := ParseEvent([]byte(`{"id":"evt_x","type":"invoice.paid","created":1764500000,"data":{"object":{"id":"in_1","customer":null}}}`))
		require.Equal(t, "event names no customer", ev.IgnoreReason)
		require.Equal(t, "evt_x", ev.DedupeKey)
	})
	t.Run("Hostile", func(t *testing.T) {
		longID := "evt_" + strings.Repeat("x", 4096)
		const created = "1764500000"
		at := time.Unix(1764500000, 0).UTC()
		tests := []struct {
			name, body                string
			dedupe, id, typ, ver, cus string
			reason                    string
			time                      time.Time
		}{
			{"NULInID", hostileEvent(`"evt_\u0000a"`, `"invoice.paid"`, `"v1"`, created, `"cus_1"`),
				hashKey("evt_\x00a"), `evt_\x00a`, "invoice.paid", "v1", "", "event id contains a NUL byte", at},
			{"NULInType", hostileEvent(`"evt_t"`, `"invoice.\u0000paid"`, `"v1"`, created, `"cus_1"`),
				"evt_t", "evt_t", `invoice.\x00paid`, "v1", "", "event type contains a NUL byte", at},
			{"NULInAPIVersion", hostileEvent(`"evt_v"`, `"invoice.paid"`, `"2025-\u0000"`, created, `"cus_1"`),
				"evt_v", "evt_v", "invoice.paid", `2025-\x00`, "", "api_version contains a NUL byte", at},
			{"NULInCustomer", hostileEvent(`"evt_c"`, `"invoice.paid"`, `"v1"`, created, `"cus_\u0000"`),
				"evt_c", "evt_c", "invoice.paid", "v1", "", "customer id contains a NUL byte", at},
			{"LongCustomer", hostileEvent(`"evt_lc"`, `"invoice.paid"`, `"v1"`, created, `"cus_`+strings.Repeat("c", 300)+`"`),
				"evt_lc", "evt_lc", "invoice.paid", "v1", "", "customer id longer than 255 bytes", at},
			{"LongID", hostileEvent(`"`+longID+`"`, `"invoice.paid"`, `"v1"`, created, `"cus_1"`),
				hashKey(longID), longID[:reconcile.MaxFieldBytes], "invoice.paid", "v1", "", "event id longer than 255 bytes", at},
			{"CreatedMaxInt64", hostileEvent(`"evt_max"`, `"invoice.paid"`, `"v1"`, "9223372036854775807", `"cus_1"`),
				"evt_max", "evt_max", "invoice.paid", "v1", "", "event time (created 9223372036854775807) is outside the years 2000-2200", time.Time{}},
			{"CreatedNegative", hostileEvent(`"evt_neg"`, `"invoice.paid"`, `"v1"`, "-1000000000000000", `"cus_1"`),
				"evt_neg", "evt_neg", "invoice.paid", "v1", "", "event time (created -1000000000000000) is outside the years 2000-2200", time.Time{}},
			{"Created1970", hostileEvent(`"evt_1970"`, `"invoice.paid"`, `"v1"`, "1", `"cus_1"`),
				"evt_1970", "evt_1970", "invoice.paid", "v1", "", "event time (created 1) is outside the years 2000-2200", time.Time{}},
			{"CreatedAbsent", `{"id":"evt_nt","type":"invoice.paid","data":{"object":{"customer":"cus_1"}}}`,
				"evt_nt", "evt_nt", "invoice.paid", "", "cus_1", "", time.Time{}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ev := ParseEvent([]byte(tt.body))
				require.Equal(t, tt.dedupe, ev.DedupeKey)
				require.Equal(t, tt.id, ev.EventID)
				require.Equal(t, tt.typ, ev.Type)
				require.Equal(t, tt.ver, ev.APIVersion)
				require.Equal(t, tt.cus, ev.CustomerID)
				require.Equal(t, tt.reason, ev.IgnoreReason)
				require.Equal(t, tt.time, ev.Time)
				require.Equal(t, tt.body, string(ev.Payload), "the payload is kept byte for byte")
				requireStorable(t, ev)
			})
		}
	})
	t.Run("Unreadable", func(t *testing.T) {
		a, b := ParseEvent([]byte(`not json`)), ParseEvent([]byte(`not json`))
		require.Contains(t, a.IgnoreReason, "unreadable event")
		require.Equal(t, a.DedupeKey, b.DedupeKey, "copies of one unreadable body must deduplicate")
		require.NotEqual(t, a.DedupeKey, ParseEvent([]byte(`{}`)).DedupeKey)
	})
}

// hostileEvent is a Stripe event whose fields are the given JSON values.
func hostileEvent(id, typ, apiVersion, created, customer string) string {
	return `{"id":` + id + `,"object":"event","type":` + typ + `,"api_version":` + apiVersion + `,"created":` + created +
		`,"data":{"object":{"id":"sub_1","object":"subscription","customer":` + customer + `}}}`
}

func hashKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// requireStorable fails unless PostgreSQL can store ev as the intake does:
// no NUL in a text column, bounded text (the dedupe key is indexed), and a
// time timestamptz holds.
func requireStorable(t testing.TB, ev reconcile.Event) {
	t.Helper()
	for name, s := range map[string]string{
		"provider": ev.Provider, "dedupe key": ev.DedupeKey, "event id": ev.EventID, "type": ev.Type,
		"api version": ev.APIVersion, "customer": ev.CustomerID,
	} {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) || len(s) > reconcile.MaxFieldBytes {
			t.Fatalf("%s cannot be stored (NUL, invalid UTF-8 or over %d bytes): %q", name, reconcile.MaxFieldBytes, s)
		}
	}
	if r := ev.IgnoreReason; strings.IndexByte(r, 0) >= 0 || !utf8.ValidString(r) || len(r) > 4*reconcile.MaxFieldBytes+100 {
		t.Fatalf("ignore reason cannot be stored: %q", r)
	}
	if !ev.Time.IsZero() && (ev.Time.Year() < 2000 || ev.Time.Year() >= 2200) {
		t.Fatalf("event time %v outside 2000..2200", ev.Time)
	}
}

// FuzzParseEvent checks that no verified body can make the parser panic or
// produce an event that cannot be stored (no dedupe key, or neither a
// customer nor a reason to ignore it).
func FuzzParseEvent(f *testing.F) {
	entries, err := os.ReadDir("testdata")
	require.NoError(f, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".json" {
			f.Add(readFixture(f, e.Name()))
		}
	}
	f.Add([]byte(`{"id":"evt_1","type":"customer.subscription.created","data":{"object":{"customer":{"id":7}}}}`))
	f.Add([]byte(`{"id":"","data":null}`))
	f.Add([]byte(`[]`))
	// Verified bodies that once got a 500 and were retried for days.
	f.Add([]byte(hostileEvent(`"evt_\u0000"`, `"invoice.\u0000paid"`, `"2025-\u0000"`, "1764500000", `"cus_\u0000"`)))
	f.Add([]byte(hostileEvent(`"evt_max"`, `"invoice.paid"`, `"v1"`, "9223372036854775807", `"cus_1"`)))
	f.Add([]byte(hostileEvent(`"evt_neg"`, `"invoice.paid"`, `"v1"`, "-1000000000000000", `"cus_1"`)))
	f.Add([]byte(hostileEvent(`"evt_`+strings.Repeat("x", 4096)+`"`, `"invoice.paid"`, `"v1"`, "1764500000", `"cus_1"`)))
	f.Add([]byte(hostileEvent(`"evt_1"`, `"invoice.paid"`, `"v1"`, "1764500000", `{"id":"cus_\u0000\ud800"}`)))
	f.Add([]byte(hostileEvent(`"evt_1"`, `"`+strings.Repeat("é", 200)+`"`, `"v1"`, "1764500000", `"cus_1"`)))
	// Thin events and connect events (also in testdata), with hostile parts.
	f.Add([]byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.invoice.paid","created":"2025-12-01T00:00:00Z","related_object":{"id":"in_\u0000","type":"invoice"}}`))
	f.Add([]byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.customer.updated","created":"9999-99-99T00:00:00Z","related_object":{"id":"cus_1","type":"customer"}}`))
	f.Add([]byte(`{"id":"evt_t","object":"v2.core.event","type":"v1.customer.updated","context":7,"related_object":{"id":7,"type":[]}}`))
	f.Add([]byte(`{"id":"evt_c","object":"event","account":"acct_1","type":"invoice.paid","created":1764500000,"data":{"object":{"customer":"cus_1"}}}`))
	f.Add([]byte(`{"id":"evt_a","object":"event","account":"acct_1","type":"invoice.paid","data":{"object":{"customer":null,"customer_account":"acct_2"}}}`))
	f.Add([]byte(`{"id":"evt_a","object":"event","type":"invoice.paid","data":{"object":{"customer_account":"acct_\u0000/x"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev := ParseEvent(body)
		requireStorable(t, ev)
		if !bytes.Equal(ev.Payload, body) {
			t.Fatalf("payload changed")
		}
		if ev.DedupeKey == "" || ev.Type == "" {
			t.Fatalf("event without dedupe key or type: %+v", ev)
		}
		if ev.CustomerID == "" && ev.IgnoreReason == "" {
			t.Fatalf("event with no customer and no reason to ignore it: %q", body)
		}
		if ev.IgnoreReason != "" && ev.CustomerID != "" && !relevant(ev.Type) {
			t.Fatalf("ignored event kept a customer: %+v", ev)
		}
		full, conn := parseEvent(body)
		if account, _ := reconcile.SplitConnected(full.CustomerID); full.CustomerID != "" && account != conn.account {
			t.Fatalf("a connected account's event keyed under another account: %q, %+v", conn.account, full)
		}
		if account, _ := reconcile.SplitConnected(full.DedupeKey); account != conn.account {
			t.Fatalf("a connected account's event deduplicated under another account: %q, %+v", conn.account, full)
		}
		if rel, ok := reconcile.RelatedOf(full.CustomerID); ok && (rel.Type != "subscription" && rel.Type != "invoice" ||
			full.IgnoreReason != "" || rel.Key() != full.CustomerID) {
			t.Fatalf("only a subscription or an invoice is stored for the worker to resolve: %+v", full)
		}
	})
}

// FuzzVerify feeds arbitrary Stripe-Signature headers and bodies: nothing
// may panic, and nothing may pass unless it carries a valid signature of
// this very body made with a configured secret.
func FuzzVerify(f *testing.F) {
	body := readFixture(f, "subscription_updated_basil.json")
	now := time.Now()
	f.Add(signedHeader(f, body, "whsec_fuzz", now).Get("Stripe-Signature"), body)
	f.Add("t=1,v1=00", body)
	f.Add("t=,v1=", []byte{})
	f.Add("v1=abc,t=99999999999", []byte(`{}`))
	f.Add(signedHeader(f, body, "whsec_other", now).Get("Stripe-Signature")+",v0=zz", body)
	for _, name := range []string{"thin_subscription_updated.json", "thin_connect.json", "connect_subscription_updated.json"} {
		b := readFixture(f, name)
		f.Add(signedHeader(f, b, "whsec_fuzz", now).Get("Stripe-Signature"), b)
	}
	v, err := NewVerifier([]string{"whsec_fuzz"}, 0)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		d, err := v.Verify(context.Background(), http.Header{"Stripe-Signature": {header}}, body)
		if err != nil {
			require.ErrorIs(t, err, reconcile.ErrBadSignature)
			return
		}
		require.NoError(t, webhook.ValidatePayload(body, header, "whsec_fuzz"), "accepted a delivery stripe-go itself rejects")
		require.NotEmpty(t, d.Event.DedupeKey)
		require.True(t, d.Event.CustomerID != "" || d.Event.IgnoreReason != "", "neither a customer nor a reason")
	})
}

// TestParseEventCustomerAccount: an event's object that bills an Account
// as a customer (Accounts v2: customer null or absent, customer_account
// set) is queued under the account's acct_ id, under the connected
// account's key when the event is one's; customer wins when both are
// named; neither is the existing "names no customer".
func TestParseEventCustomerAccount(t *testing.T) {
	t.Parallel()
	event := func(account, object string) []byte {
		top := ""
		if account != "" {
			top = `"account":"` + account + `",`
		}
		return []byte(`{"id":"evt_1",` + top + `"object":"event","type":"invoice.paid","created":1764500000,"data":{"object":` + object + `}}`)
	}
	tests := []struct {
		name, account, object, customer, ignore string
	}{
		{"CustomerNull", "", `{"object":"invoice","customer":null,"customer_account":"acct_B"}`, "acct_B", ""},
		{"CustomerAbsent", "", `{"object":"subscription","customer_account":"acct_B"}`, "acct_B", ""},
		{"BothNamed", "", `{"object":"invoice","customer":"cus_1","customer_account":"acct_B"}`, "cus_1", ""},
		{"OfAConnectedAccount", "acct_P", `{"object":"invoice","customer":null,"customer_account":"acct_B"}`, "acct_P/acct_B", ""},
		{"NotAnAcctID", "", `{"object":"invoice","customer":null,"customer_account":"cus_B"}`, "", "event names no customer"},
		{"Neither", "", `{"object":"invoice","customer":null,"customer_account":null}`, "", "event names no customer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := ParseEvent(event(tt.account, tt.object))
			require.Equal(t, tt.customer, ev.CustomerID)
			require.Equal(t, tt.ignore, ev.IgnoreReason)
		})
	}
}
