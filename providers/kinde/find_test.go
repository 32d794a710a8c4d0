package kinde

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/mocks/inproc"
	kindemock "github.com/billsync/billsync/mocks/kinde"
	"github.com/billsync/billsync/reconcile"
)

// findAll pages c's FindPage from cursor to its end: every customer found
// and the cursors it went through.
func findAll(t *testing.T, c *Client, cursor string) ([]reconcile.Found, []string) {
	t.Helper()
	var all []reconcile.Found
	var cursors []string
	for range 100 {
		found, next, more, err := c.FindPage(context.Background(), cursor)
		require.NoError(t, err)
		require.NotContains(t, next, "\n")
		all = append(all, found...)
		cursors = append(cursors, next)
		if !more {
			return all, cursors
		}
		cursor = next
	}
	t.Fatal("the listing never ended")
	return nil, nil
}

// TestFindPagesUsersThenOrganizations: the finder pages through the users
// (page_size at a time, next_token) and then the organisations (one read
// each), finding every billing customer with the app's reference (the
// user's id, the organisation's code), and skips users and organisations
// without one. (An organisation deleted between the list and its read,
// a 404, is skipped by the code but not tested here.)
func TestFindPagesUsersThenOrganizations(t *testing.T) {
	t.Parallel()
	f := newFakeKinde(t, kindemock.Options{})
	for _, u := range []kindemock.User{
		{ID: "kp_1", Email: "a@example.com", CustomerID: "customer_1"},
		{ID: "kp_2", Email: "nobody@example.com"},
		{ID: "kp_3", CustomerID: "customer_3"},
		{ID: "kp_4", CustomerID: "customer_4"},
		{ID: "kp_5", CustomerID: "customer_5"},
	} {
		f.AddUser(u)
	}
	f.SetAgreements("customer_owned", []kindemock.Agreement{{PlanCode: "customer_pro_plan"}}) // a user of its own
	f.AddOrganization(kindemock.Organization{Code: "org_a", Name: "A", CustomerID: "customer_org_a"})
	f.AddOrganization(kindemock.Organization{Code: "org_free", Name: "no billing"})
	f.AddOrganization(kindemock.Organization{Code: "org_b", CustomerID: "customer_org_b"})
	c := testClient(t, f, Config{PageSize: 2})

	found, cursors := findAll(t, c, "")
	require.Equal(t, []reconcile.Found{
		{CustomerID: "customer_1", UserRef: "kp_1"}, {CustomerID: "customer_3", UserRef: "kp_3"},
		{CustomerID: "customer_4", UserRef: "kp_4"}, {CustomerID: "customer_5", UserRef: "kp_5"},
		{CustomerID: "customer_owned", UserRef: kindemock.OwnerPrefix + "customer_owned"},
		{CustomerID: "customer_org_a", UserRef: "org_a"}, {CustomerID: "customer_org_b", UserRef: "org_b"},
	}, found)
	require.Equal(t, 3, f.count("/api/v1/users"), "6 users in pages of 2")
	require.Equal(t, 2, f.count("/api/v1/organizations"), "3 organisations in pages of 2")
	require.Equal(t, 3, f.count("/api/v1/organization"), "one read per organisation")
	require.Equal(t, findDone, cursors[len(cursors)-1])

	// Resumed at a cursor it gave, it finds the rest and nothing before.
	rest, _ := findAll(t, c, cursors[1])
	require.Equal(t, found[3:], rest)
	none, _ := findAll(t, c, findDone)
	require.Empty(t, none, "resuming at the end finds nothing")
	_, _, _, err := c.FindPage(context.Background(), "stripe:abc")
	require.True(t, reconcile.IsPermanent(err), "a cursor not its own")
}

// TestFindRetriesAFailedPage: a 500 and a 429 on a users page and on an
// organisation's read are retried; the listing finds every customer once.
func TestFindRetriesAFailedPage(t *testing.T) {
	t.Parallel()
	f := newFakeKinde(t, kindemock.Options{})
	for i := range 7 {
		f.AddUser(kindemock.User{ID: "kp_" + string(rune('a'+i)), CustomerID: "customer_" + string(rune('a'+i))})
	}
	f.AddOrganization(kindemock.Organization{Code: "org_x", CustomerID: "customer_org_x"})
	// The second users page fails once with a 500 and once with a 429,
	// the organisation's read once with a 500.
	var users, org atomic.Int32
	inner := f.handler
	f.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/api/v1/users" && r.URL.Query().Get("next_token") != "":
			switch users.Add(1) {
			case 1:
				f.SetFaults(kindemock.Faults{Error5xxRate: 1})
				defer f.SetFaults(kindemock.Faults{})
			case 2:
				f.SetFaults(kindemock.Faults{RateLimitRate: 1, RetryAfter: 1})
				defer f.SetFaults(kindemock.Faults{})
			}
		case r.URL.Path == "/api/v1/organization" && org.Add(1) == 1:
			f.SetFaults(kindemock.Faults{Error5xxRate: 1})
			defer f.SetFaults(kindemock.Faults{})
		}
		inner.ServeHTTP(w, r)
	})
	c := bubblelessClient(t, f)
	found, _ := findAll(t, c, "")
	require.Len(t, found, 8)
	seen := map[string]bool{}
	for _, x := range found {
		require.False(t, seen[x.CustomerID], "found once: %s", x.CustomerID)
		seen[x.CustomerID] = true
	}
	require.Equal(t, 3+2, f.count("/api/v1/users"), "3 pages of 3, the second failed twice")
	require.Equal(t, 2, f.count("/api/v1/organization"), "failed once, then read")
}

// bubblelessClient is testClient reaching f through f.handler as it is
// now (the test may have wrapped it).
func bubblelessClient(t *testing.T, f *fakeKinde) *Client {
	t.Helper()
	c, err := newClient(testConfig(f, Config{PageSize: 3}), inproc.Transport{Handler: f.handler})
	require.NoError(t, err)
	return c
}

// TestReadUsersOddShapes: users without billing, with billing null or not
// an object, with an empty or blank customer id, or an id billsync cannot
// keep are skipped; next_token absent, null or not a string ends the
// listing.
func TestReadUsersOddShapes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", reconcile.MaxFieldBytes+1)
	for _, c := range []struct {
		name, page string
		want       []reconcile.Found
		next       string
	}{
		{"NoBilling", `{"users":[{"id":"kp_1"}],"next_token":"t1"}`, nil, "t1"},
		{"BillingNull", `{"users":[{"id":"kp_1","billing":null}]}`, nil, ""},
		{"BillingNotAnObject", `{"users":[{"id":"kp_1","billing":"customer_1"}]}`, nil, ""},
		{"CustomerEmpty", `{"users":[{"id":"kp_1","billing":{"customer_id":""}}],"next_token":null}`, nil, ""},
		{"CustomerBlank", `{"users":[{"id":"kp_1","billing":{"customer_id":"  "}}]}`, nil, ""},
		{"CustomerNull", `{"users":[{"id":"kp_1","billing":{"customer_id":null}}]}`, nil, ""},
		{"CustomerNUL", `{"users":[{"id":"kp_1","billing":{"customer_id":"c\u0000"}}]}`, nil, ""},
		{"CustomerTooLong", `{"users":[{"id":"kp_1","billing":{"customer_id":"` + long + `"}}]}`, nil, ""},
		{"NoUserID", `{"users":[{"billing":{"customer_id":"customer_1"}}]}`, []reconcile.Found{{CustomerID: "customer_1"}}, ""},
		{"UserIDTooLong", `{"users":[{"id":"` + long + `","billing":{"customer_id":"customer_1"}}]}`, []reconcile.Found{{CustomerID: "customer_1"}}, ""},
		{"UserNull", `{"users":[null,7,{"id":"kp_2","billing":{"customer_id":"customer_2"}}],"next_token":5}`,
			[]reconcile.Found{{CustomerID: "customer_2", UserRef: "kp_2"}}, ""},
		{"UsersNull", `{"users":null,"next_token":"t2"}`, nil, "t2"},
		{"Empty", `{}`, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			found, next, err := readUsers([]byte(c.page))
			require.NoError(t, err)
			require.Equal(t, c.want, found)
			require.Equal(t, c.next, next)
		})
	}
	_, _, err := readUsers([]byte(`[]`))
	require.True(t, reconcile.IsPermanent(err), "not a page")

	for page, want := range map[string]string{
		`{"code":"org_1","billing":{"billing_customer_id":"customer_9"}}`: "customer_9",
		`{"code":"org_1","billing":null}`:                                 "",
		`{"code":"org_1"}`:                                                "",
		`{"code":"org_1","billing":{"billing_customer_id":""}}`:           "",
		`{"code":"org_1","billing":{"agreements":[]}}`:                    "",
	} {
		got, err := readOrgBilling([]byte(page))
		require.NoError(t, err)
		require.Equal(t, want, got, page)
	}
	codes, next, err := readOrgs([]byte(`{"organizations":[{"code":"org_1"},{"name":"no code"},null,{"code":""}],"next_token":"t"}`))
	require.NoError(t, err)
	require.Equal(t, []string{"org_1"}, codes)
	require.Equal(t, "t", next)
}

// FuzzReadFindPages: no page of users, organisations or an organisation
// makes the readers panic; what they find is a customer id billsync keeps
// as is, never empty.
func FuzzReadFindPages(f *testing.F) {
	for _, seed := range []string{
		`{"code":"OK","users":[{"id":"kp_1","email":"a@b","billing":{"customer_id":"customer_1"}}],"next_token":"abc"}`,
		`{"users":[{"id":"kp_1","billing":null},{"id":"kp_2"},{"billing":{"customer_id":""}}]}`,
		`{"organizations":[{"code":"org_1","name":"A"}],"next_token":null}`,
		`{"code":"org_1","billing":{"billing_customer_id":"customer_9","agreements":[{"plan_code":"p"}]}}`,
		`[]`, `null`, `{"users":{"id":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		check := func(customer string) {
			if clean, problem := reconcile.Storable(customer); customer == "" || problem != "" || clean != customer {
				t.Fatalf("found %q in %q", customer, page)
			}
		}
		if found, _, err := readUsers(page); err == nil {
			for _, x := range found {
				check(x.CustomerID)
			}
		} else {
			require.True(t, reconcile.IsPermanent(err))
		}
		if codes, _, err := readOrgs(page); err == nil {
			for _, c := range codes {
				check(c)
			}
		}
		if customer, err := readOrgBilling(page); err == nil && customer != "" {
			check(customer)
		}
	})
}

// TestFindsWhatTheControlRoutesAdd: users and organisations added from
// outside the process (the fake's POST /_mock/users and
// /_mock/organizations, as black-box scenarios drive it) are found like
// those added in Go; a body without an id or code is 400 and adds nothing.
func TestFindsWhatTheControlRoutesAdd(t *testing.T) {
	t.Parallel()
	f := newFakeKinde(t, kindemock.Options{})
	post := func(path, body string) int {
		t.Helper()
		resp, err := http.Post(f.URL+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, post("/_mock/users", `{"id":"kp_ctl","email":"c@example.com","customer_id":"customer_ctl"}`))
	require.Equal(t, http.StatusOK, post("/_mock/organizations", `{"code":"org_ctl","name":"Ctl","customer_id":"customer_org_ctl"}`))
	require.Equal(t, http.StatusBadRequest, post("/_mock/users", `{"email":"no-id@example.com","customer_id":"customer_x"}`))
	require.Equal(t, http.StatusBadRequest, post("/_mock/organizations", `{"name":"no code","customer_id":"customer_y"}`))
	require.Equal(t, http.StatusBadRequest, post("/_mock/users", `not json`))

	found, _ := findAll(t, testClient(t, f, Config{}), "")
	require.ElementsMatch(t, []reconcile.Found{
		{CustomerID: "customer_ctl", UserRef: "kp_ctl"},
		{CustomerID: "customer_org_ctl", UserRef: "org_ctl"},
	}, found)
}
