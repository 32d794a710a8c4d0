package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
	"github.com/billsync/billsync/store/storetest"
)

type feedPage struct {
	Changes []struct {
		ID        int64    `json:"id"`
		Seq       int64    `json:"seq"`
		AccountID int64    `json:"account_id"`
		Changed   []string `json:"changed"`
		After     struct {
			Balance int64 `json:"balance"`
		} `json:"after"`
	} `json:"changes"`
	Next string `json:"next"`
}

func (e *appEnv) feed(query string) (feedPage, appAnswer) {
	e.t.Helper()
	a := e.do("GET", "/api/changes"+query, appToken, "")
	var p feedPage
	if a.code == http.StatusOK {
		require.NoError(e.t, json.Unmarshal([]byte(a.body), &p), a.body)
	}
	return p, a
}

// TestFeedPages: the app pages the feed with its cursor and gets each
// change once, in order; at the end it keeps its cursor.
func TestChangeFeedPages(t *testing.T) {
	e := newAppEnv(t, appToken)
	id := e.account("stripe", "cus_1", "u1", "price_pro")
	require.Equal(t, http.StatusOK, e.debit("u1", "k1", 5).code)
	require.Equal(t, http.StatusOK, e.debit("u1", "k2", 7).code)

	var seqs []int64
	var balances []int64
	next := ""
	for range 3 {
		p, a := e.feed("?limit=2&after=" + next)
		require.Equal(t, http.StatusOK, a.code, a.body)
		for _, c := range p.Changes {
			require.Equal(t, id, c.AccountID)
			seqs = append(seqs, c.Seq)
			balances = append(balances, c.After.Balance)
		}
		require.NotEmpty(t, p.Next)
		next = p.Next
	}
	require.Equal(t, []int64{1, 2, 3}, seqs)
	require.Equal(t, []int64{500, 495, 488}, balances)
	p, a := e.feed("?after=" + next)
	require.Equal(t, http.StatusOK, a.code)
	require.Empty(t, p.Changes)
	require.Equal(t, next, p.Next, "nothing new: the same cursor back")
}

// TestFeedLongPollWakes: a long poll at the end of the feed returns the
// next change as soon as it commits; the fallback poll is an hour, so only
// the NOTIFY can have woken it before its 30 s are up.
func TestChangeFeedLongPollWakes(t *testing.T) {
	e := newAppEnv(t, appToken)
	e.account("stripe", "cus_1", "u1", "price_pro")
	p, _ := e.feed("")
	require.Len(t, p.Changes, 1)

	got := make(chan feedPage, 1)
	go func() {
		a := e.do("GET", "/api/changes?wait=30s&after="+p.Next, appToken, "")
		var q feedPage
		_ = json.Unmarshal([]byte(a.body), &q)
		got <- q
	}()
	require.Equal(t, http.StatusOK, e.debit("u1", "k1", 5).code)
	q := <-got
	require.Len(t, q.Changes, 1, "the long poll returns the debit's change, not an empty page after 30 s")
	require.Equal(t, int64(2), q.Changes[0].Seq)
	require.Equal(t, []string{"balance"}, q.Changes[0].Changed)
}

// TestFeedAfterPrune: once a prune took a user's old changes, an app
// whose cursor points into them pages on from the oldest change left.
func TestChangeFeedAfterPrune(t *testing.T) {
	e := newAppEnv(t, appToken)
	e.account("stripe", "cus_old", "u_old", "price_pro")
	require.Equal(t, http.StatusOK, e.debit("u_old", "k1", 5).code)
	p, a := e.feed("?limit=1&wait=30s")
	require.Equal(t, http.StatusOK, a.code, a.body)
	require.Len(t, p.Changes, 1)
	cursor := p.Next
	id := e.account("stripe", "cus_new", "u_new", "price_pro")
	storetest.AgeAccountChanges(t, e.st, "stripe", "cus_old", 100*24*time.Hour)
	pruned, err := e.st.Prune(context.Background(), reconcile.Retention{OlderThan: 90 * 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 2, pruned.Changes, "u_old's two changes")

	for _, after := range []string{cursor, ""} {
		p, a = e.feed("?wait=30s&after=" + after)
		require.Equal(t, http.StatusOK, a.code, a.body)
		require.Len(t, p.Changes, 1, "after %q", after)
		require.Equal(t, id, p.Changes[0].AccountID)
		q, _ := e.feed("?after=" + p.Next)
		require.Empty(t, q.Changes)
	}
}

func TestChangeFeedBadQuery(t *testing.T) {
	e := newAppEnv(t, appToken)
	for _, q := range []string{"?after=12", "?after=x-1", "?limit=0", "?limit=1001", "?limit=ten", "?wait=2m", "?wait=-1s", "?wait=soon",
		"?after=%zz", "?limit=1&limit=2", "?after=1-2;limit=5"} {
		_, a := e.feed(q)
		require.Equal(t, http.StatusBadRequest, a.code, q)
		require.NotEmpty(t, a.json(t)["error"], q)
	}
}
