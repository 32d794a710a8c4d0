package stripe

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFeedTypesAreRelevant: every type the feed lists is one the intake
// acts on, and Stripe takes at most 20 in types[].
func TestFeedTypesAreRelevant(t *testing.T) {
	require.LessOrEqual(t, len(FeedTypes), 20)
	for _, typ := range FeedTypes {
		require.True(t, relevant(typ), typ)
	}
}

// TestReadEventsPage: each entry is read as the intake reads a webhook
// body, pending_webhooks marks it undelivered, and the last id is the next
// cursor while has_more.
func TestReadEventsPage(t *testing.T) {
	page, err := ReadEventsPage([]byte(`{"object":"list","has_more":true,"data":[
		{"id":"evt_2","object":"event","type":"customer.subscription.updated","created":1764500100,"pending_webhooks":1,
		 "data":{"object":{"object":"subscription","id":"sub_1","customer":"cus_1","status":"active"}}},
		{"id":"evt_1","object":"event","type":"product.created","created":1764500000,"pending_webhooks":0,"data":{"object":{"object":"product"}}}]}`))
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	require.Equal(t, "evt_1", page.Next)
	first, second := page.Events[0], page.Events[1]
	require.Equal(t, "cus_1", first.Event.CustomerID)
	require.True(t, first.Undelivered)
	require.Equal(t, int64(1764500100), first.Event.Time.Unix())
	require.NotNil(t, first.Event.Expect)
	require.False(t, second.Undelivered)
	require.Contains(t, second.Event.IgnoreReason, "does not affect billing state")

	last, err := ReadEventsPage([]byte(`{"object":"list","has_more":false,"data":[]}`))
	require.NoError(t, err)
	require.Empty(t, last.Events)
	require.Empty(t, last.Next)

	for _, bad := range []string{`[]`, `{"data":{}}`, `{"data":[],"has_more":"yes"}`, `{"data":[7],"has_more":true}`, `not json`} {
		_, err := ReadEventsPage([]byte(bad))
		require.Error(t, err, bad)
	}
}

// FuzzReadEventsPage: whatever the page, ReadEventsPage answers an error
// or events that can all be stored, and a next cursor only from an entry's
// own id.
func FuzzReadEventsPage(f *testing.F) {
	f.Add([]byte(`{"object":"list","has_more":true,"data":[{"id":"evt_1","object":"event","type":"invoice.paid","created":1764500000,"pending_webhooks":2,"data":{"object":{"object":"invoice","customer":"cus_1"}}}]}`))
	f.Add([]byte(`{"data":[{"id":"evt_\u0000","type":"invoice.paid","created":"x","pending_webhooks":"2"},null,7,"s",[]],"has_more":false}`))
	f.Add([]byte(`{"data":null,"has_more":null}`))
	f.Add([]byte(`{"data":[{"id":"evt_1","object":"v2.core.event","type":"v1.invoice.paid","related_object":{"id":"in_1","type":"invoice"}}],"has_more":true}`))
	f.Add(fmt.Appendf(nil, `{"data":[%s],"has_more":true}`, readFixture(f, "invoice_paid_2024.json")))
	f.Fuzz(func(t *testing.T, body []byte) {
		page, err := ReadEventsPage(body)
		if err != nil {
			require.Empty(t, page.Events)
			return
		}
		for _, e := range page.Events {
			requireStorable(t, e.Event)
		}
		if page.Next != "" {
			require.Equal(t, page.Events[len(page.Events)-1].Event.EventID, page.Next)
		}
	})
}
