package store_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store"
	"github.com/billsync/billsync/store/storetest"
)

// TestStorageFootprint measures what billsync's tables hold per delivery,
// per reconcile and per account (pg_total_relation_size, indexes and TOAST
// included), through the store's own writes with recorded Stripe payloads
// (4.6 and 5.9 KB): per account, a customer.subscription.updated and an
// invoice.paid event, a third of the deliveries sent twice, one reconcile
// (account, grant, log row, the app's change). Then everything is aged past the retention and
// pruned: only accounts and the ledger remain. docs/capacity.md quotes its
// figures; BILLSYNC_FOOTPRINT_ACCOUNTS sets the scale (default 1000):
//
//	BILLSYNC_FOOTPRINT_ACCOUNTS=5000 go test -run TestStorageFootprint -v -timeout 30m ./store/
func TestStorageFootprint(t *testing.T) {
	ctx := context.Background()
	accounts := 1000
	if v := os.Getenv("BILLSYNC_FOOTPRINT_ACCOUNTS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		accounts = n
	}
	st := storetest.NewStore(t)
	var payloads [][]byte
	for _, f := range []string{"subscription_updated.json", "invoice_paid.json"} {
		b, err := os.ReadFile("testdata/" + f)
		require.NoError(t, err)
		payloads = append(payloads, b)
	}
	deliveries := 0
	for i := range accounts {
		customer := fmt.Sprintf("cus_%014d", i)
		for k, p := range payloads {
			id := fmt.Sprintf("evt_%d_%022d", k, i)
			// Each event's own id and customer, so no two rows are alike.
			body := bytes.Replace(p, []byte(`"object": "event"`), []byte(`"object": "event", "billsync_test": "`+id+customer+`"`), 1)
			ev := reconcile.Event{Provider: "stripe", DedupeKey: id, EventID: id, Type: []string{"customer.subscription.updated", "invoice.paid"}[k],
				CustomerID: customer, APIVersion: "2020-03-02", Time: time.Now(), Payload: body}
			copies := 1
			if (i*2+k)%3 == 0 {
				copies = 2
			}
			for range copies {
				_, err := st.StoreReceipt(ctx, reconcile.Receipt{Event: ev, DeliveryID: "req_" + id, RemoteAddr: "54.187.174.169"})
				require.NoError(t, err)
				deliveries++
			}
		}
	}
	plans := testenv.Plans()
	for {
		jobs, err := st.Claim(ctx, "footprint", 100, time.Minute)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		for _, job := range jobs {
			out, err := applySnap(ctx, st, job, dbNow(t, st), liveSnap(job.CustomerID, "price_pro"), plans)
			require.NoError(t, err)
			require.Equal(t, reconcile.ResultApplied, out.Result)
		}
	}
	_, err := st.Pool().Exec(ctx, `VACUUM ANALYZE`)
	require.NoError(t, err)

	sizes := tableSizes(t, st)
	rows := func(table string) int64 { return int64(count(t, st, `SELECT count(*) FROM `+table)) }
	events, receipts, logRows, ledger := rows("inbox_events"), rows("receipts"), rows("reconcile_log"), rows("ledger")
	require.EqualValues(t, 2*accounts, events)
	require.EqualValues(t, deliveries, receipts)
	require.EqualValues(t, accounts, logRows)
	require.EqualValues(t, accounts, rows("accounts"))
	require.EqualValues(t, accounts, ledger, "one grant each")
	changes := rows("account_changes")
	require.EqualValues(t, accounts, changes, "one change each: the account's creation")

	perDelivery := float64(sizes["inbox_events"]+sizes["receipts"]) / float64(deliveries)
	perEvent := float64(sizes["inbox_events"]) / float64(events)
	perReceipt := float64(sizes["receipts"]) / float64(receipts)
	perReconcile := float64(sizes["reconcile_log"]) / float64(logRows)
	perAccount := float64(sizes["accounts"]) / float64(accounts)
	perLedgerRow := float64(sizes["ledger"]) / float64(ledger)
	perChange := float64(sizes["account_changes"]) / float64(changes)
	var report strings.Builder
	w := tabwriter.NewWriter(&report, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "%d accounts, %d deliveries of %d events\t\n", accounts, deliveries, events)
	fmt.Fprintf(w, "per event row (payload in TOAST)\t%.0f B\n", perEvent)
	fmt.Fprintf(w, "per receipt\t%.0f B\n", perReceipt)
	fmt.Fprintf(w, "per delivery (events + receipts / deliveries)\t%.0f B\n", perDelivery)
	fmt.Fprintf(w, "per reconcile (reconcile_log row, before/after)\t%.0f B\n", perReconcile)
	fmt.Fprintf(w, "per account row\t%.0f B\n", perAccount)
	fmt.Fprintf(w, "per ledger row (a grant or a debit)\t%.0f B\n", perLedgerRow)
	fmt.Fprintf(w, "per account change (account_changes row, before/after)\t%.0f B\n", perChange)
	require.NoError(t, w.Flush())
	t.Log("\n" + report.String())
	// An event row holds a payload of kilobytes (compressed in TOAST); a
	// receipt, a log row and an account are small rows.
	require.Greater(t, perEvent, 500.0)
	require.Less(t, perReceipt, perEvent)
	require.Less(t, perAccount, perEvent)

	// Everything 100 days old, in one statement per table.
	for _, sql := range []string{
		`UPDATE inbox_events SET received_at = received_at - interval '100 days', last_seen_at = last_seen_at - interval '100 days'`,
		`UPDATE receipts SET received_at = received_at - interval '100 days'`,
		`UPDATE reconcile_log SET created_at = created_at - interval '100 days'`,
		`UPDATE account_changes SET created_at = created_at - interval '100 days'`,
	} {
		_, err := st.Pool().Exec(ctx, sql)
		require.NoError(t, err)
	}
	p, err := st.Prune(ctx, reconcile.Retention{OlderThan: 90 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, events, p.Events)
	require.Equal(t, receipts, p.Receipts)
	require.Equal(t, logRows, p.LogRows)
	require.Equal(t, changes, p.Changes, "no endpoint: each change is finished")
	require.Zero(t, rows("inbox_events")+rows("receipts")+rows("reconcile_log")+rows("account_changes"))
	require.EqualValues(t, accounts, rows("accounts"))
	require.Equal(t, ledger, rows("ledger"))
}

// tableSizes is pg_total_relation_size of each table.
func tableSizes(t *testing.T, st *store.Store) map[string]int64 {
	t.Helper()
	sizes, err := st.TableSizes(context.Background())
	require.NoError(t, err)
	m := map[string]int64{}
	for _, s := range sizes {
		m[s.Table] = s.Bytes
	}
	require.Contains(t, m, "inbox_events")
	return m
}
