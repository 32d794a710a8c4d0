package store_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// qmRead is what the JSON-heavy paths read back for one customer: the
// intake's expectation as a claim hands it over, the stored event, the
// account with its features and entitlements, its history and the
// reconcile log's documents, its changes and their deliveries.
type qmRead struct {
	Account    reconcile.Account
	Detail     reconcile.AccountDetail
	Event      reconcile.StoredEvent
	Payload    []byte
	Changes    []reconcile.ChangeFeedEntry
	Deliveries []reconcile.AppDelivery
	LogDocs    []string // reconcile_log before | after
}

// TestQueryModesAgree writes the same customer's story through a store in
// each of pgx's five query modes, all on one database (PgBouncer needs
// exec, simple_protocol or cache_describe; users set any), then reads every
// story back in every mode: the reads must be byte for byte the same
// whatever mode reads, and each mode's story must be the one
// cache_statement (the default) writes, ids, clocks and names aside. A
// struct or []byte sent into a jsonb parameter fails the intake or the
// apply in exec and simple_protocol; a value encoded differently by mode
// shows as a difference here.
func TestQueryModesAgree(t *testing.T) {
	ctx := context.Background()
	url := storetest.URL(t)
	const endpoint = "https://app.example/billsync"
	stores := make([]*store.Store, len(storetest.QueryModes))
	for i, m := range storetest.QueryModes {
		stores[i] = storetest.OpenStoreWithEndpoints(t, storetest.WithQueryMode(url, m), store.Options{}, endpoint)
	}

	// Writes: customer qm<i> through the store in mode i.
	type written struct {
		Expect  *reconcile.Expectation
		UserRef string
		Outcome string
		Result  reconcile.Result
	}
	writes := make([]written, len(stores))
	accountIDs := make([]int64, len(stores))
	eventIDs := make([]int64, len(stores))
	for i, st := range stores {
		mode := storetest.QueryModes[i]
		customer, user := "cus_qm"+strconv.Itoa(i), "user_qm"+strconv.Itoa(i)
		expect := &reconcile.Expectation{SubscriptionID: "sub_" + customer, Status: "active", Prices: []string{"price_pro"}}
		stored, err := st.StoreReceipt(ctx, reconcile.Receipt{DeliveryID: "dlv_qm" + strconv.Itoa(i), RemoteAddr: "192.0.2.7",
			Event: reconcile.Event{
				Provider: "stripe", DedupeKey: "evt_qm" + strconv.Itoa(i), EventID: "evt_qm" + strconv.Itoa(i),
				Type: "customer.subscription.updated", CustomerID: customer, UserRef: user, APIVersion: "2025-03-31.basil",
				Time:    time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC),
				Payload: []byte(`{"note":"é \"quoted\" \\ back\\slash","data":{"object":{"items":[1,2.50,"\u00e9"]}}}`),
				Expect:  expect,
			}})
		require.NoError(t, err, mode)
		require.False(t, stored.Duplicate, mode)
		eventIDs[i] = stored.InboxID

		jobs, err := st.Claim(ctx, "qm", 10, time.Minute)
		require.NoError(t, err, mode)
		require.Len(t, jobs, 1, mode)
		require.Equal(t, expect, jobs[0].Expect, "%s: the claim hands over the intake's expectation", mode)
		require.Equal(t, user, jobs[0].UserRef, mode)

		snap := liveSnap(customer, "price_pro")
		snap.UserRef, snap.Email = user, "qm"+strconv.Itoa(i)+"@example.com"
		snap.Entitlements = []reconcile.Entitlement{{Provider: "stripe", Key: "seats-50"}}
		out, err := applySnap(ctx, st, jobs[0], dbNow(t, st), snap, testenv.FeaturePlans())
		require.NoError(t, err, mode)
		require.Equal(t, reconcile.ResultApplied, out.Result, "%s: %s", mode, out.Text)
		writes[i] = written{Expect: jobs[0].Expect, UserRef: jobs[0].UserRef, Outcome: out.Text, Result: out.Result}
		accountIDs[i] = out.AccountID
		storetest.FanOut(t, st, endpoint) // each mode's fan-out creates its change's delivery
	}

	// Reads: every customer in every mode.
	read := func(st *store.Store, i int) qmRead {
		customer := "cus_qm" + strconv.Itoa(i)
		var r qmRead
		var err error
		r.Account, err = st.Account(ctx, "stripe", customer)
		require.NoError(t, err)
		a, err := st.AccountByID(ctx, accountIDs[i])
		require.NoError(t, err)
		require.Equal(t, r.Account, a)
		r.Detail, err = st.AccountDetail(ctx, accountIDs[i])
		require.NoError(t, err)
		r.Event, err = st.Event(ctx, eventIDs[i])
		require.NoError(t, err)
		r.Payload, err = st.EventPayload(ctx, eventIDs[i])
		require.NoError(t, err)
		r.Changes, err = st.AccountChanges(ctx, accountIDs[i], 10)
		require.NoError(t, err)
		all, err := st.Deliveries(ctx, "", 100)
		require.NoError(t, err)
		for _, d := range all {
			if d.AccountID == accountIDs[i] {
				r.Deliveries = append(r.Deliveries, d)
			}
		}
		rows, err := st.Pool().Query(ctx, `SELECT coalesce(before::text, 'null') || ' | ' || coalesce(after::text, 'null')
			FROM reconcile_log WHERE customer_id = $1 ORDER BY id`, customer)
		require.NoError(t, err)
		for rows.Next() {
			var doc string
			require.NoError(t, rows.Scan(&doc))
			r.LogDocs = append(r.LogDocs, doc)
		}
		require.NoError(t, rows.Err())
		return r
	}
	reads := make([][]qmRead, len(stores)) // [writer][reader]
	for i := range stores {
		for _, st := range stores {
			reads[i] = append(reads[i], read(st, i))
		}
		for j := range stores {
			require.Equal(t, reads[i][0], reads[i][j], "what %s wrote reads differently in %s",
				storetest.QueryModes[i], storetest.QueryModes[j])
		}
	}
	var feeds [][]reconcile.ChangeFeedEntry
	for j, st := range stores {
		cs, err := st.Changes(ctx, reconcile.ChangeCursor{}, 100)
		require.NoError(t, err, storetest.QueryModes[j])
		require.Len(t, cs, len(stores))
		feeds = append(feeds, cs)
		require.Equal(t, feeds[0], cs, "the feed reads differently in %s", storetest.QueryModes[j])
	}

	// What each mode wrote is what the default mode wrote.
	r0 := reads[0][0]
	require.NotEmpty(t, r0.Account.Features)
	require.Equal(t, []reconcile.Entitlement{{Provider: "stripe", Key: "seats-50"}}, r0.Account.Entitlements)
	require.Len(t, r0.Changes, 1)
	require.Len(t, r0.Deliveries, 1)
	require.Equal(t, r0.Changes[0].Body, r0.Deliveries[0].Body, "a delivery carries its change's bytes")
	require.Equal(t, r0.Account.Features, r0.Changes[0].After.Features)
	require.Len(t, r0.LogDocs, 1)
	require.True(t, strings.HasPrefix(r0.LogDocs[0], "null | {"), r0.LogDocs[0])
	require.Contains(t, r0.LogDocs[0], `"features": [{`)
	want := scrubQM(t, 0, writes[0], r0)
	for i := 1; i < len(stores); i++ {
		require.Equal(t, want, scrubQM(t, i, writes[i], reads[i][0]), "%s writes differently from %s",
			storetest.QueryModes[i], storetest.QueryModes[0])
	}
}

// scrubQM is customer qm<i>'s writes and reads as JSON with what differs
// between customers by design taken out: ids, the database's clock, and
// the customer's own names.
func scrubQM(t *testing.T, i int, w any, r qmRead) string {
	t.Helper()
	zeroAccount := func(a *reconcile.Account) { a.ID, a.ObservedAt = 0, time.Time{} }
	zeroAccount(&r.Account)
	zeroAccount(&r.Detail.Account)
	for k := range r.Detail.Ledger {
		r.Detail.Ledger[k].CreatedAt, r.Detail.Ledger[k].Key = time.Time{}, "" // keyed by the account id
	}
	for k := range r.Detail.Events {
		r.Detail.Events[k].ID, r.Detail.Events[k].ReceivedAt = 0, time.Time{}
	}
	for k := range r.Detail.History {
		r.Detail.History[k].ObservedAt, r.Detail.History[k].CreatedAt = time.Time{}, time.Time{}
	}
	r.Event.ID, r.Event.ReceivedAt = 0, time.Time{}
	for k := range r.Changes {
		c := &r.Changes[k]
		c.ID, c.AccountID, c.Time, c.Cursor, c.Body = 0, 0, time.Time{}, reconcile.ChangeCursor{}, nil
		zeroAccount(&c.After.Account)
		if c.Ledger != nil {
			c.Ledger.Key = ""
		}
		for m := range c.LedgerMoves {
			c.LedgerMoves[m].Key = ""
		}
	}
	for k := range r.Deliveries {
		d := &r.Deliveries[k]
		d.ChangeID, d.AccountID, d.CreatedAt, d.DueAt, d.Body = 0, 0, time.Time{}, time.Time{}, nil
	}
	b, err := json.Marshal(struct {
		W any
		R qmRead
	}{w, r})
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), "qm"+strconv.Itoa(i), "qmN")
}
