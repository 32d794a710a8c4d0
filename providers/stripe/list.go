package stripe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/billsync/billsync/providers/internal/attempt"
	"github.com/billsync/billsync/reconcile"
)

// ListPage reads a page of the customer list (GET /v1/customers, 100 a
// page, newest first, subscriptions expanded) at cursor, and returns the
// snapshots of its customers. Each customer is resolved on its page by the
// rule Fetch uses (resolve): a customer with more than 10 current
// subscriptions costs one subscription list more, made in place so the
// snapshot is the one Fetch would give. Memory is one page.
//
// A cursor is a part of the list: the customers created in a range of
// seconds, after a customer (see listCursor); "" is the whole list, and a
// bare customer id the whole list after it. Split divides a part in two.
//
// A customer whose data is unreadable (a permanent error) is left out and
// logged: the sweep enqueues uncovered accounts, and the worker's Fetch
// records the reason. Stripe's customer list leaves out deleted customers;
// their accounts are enqueued the same way.
//
// Its requests wait for a rate limiter of their own (Config.ListRateLimit)
// before the client's shared one, so a sweep never takes the whole rate
// from webhook-triggered fetches.
func (c *Client) ListPage(ctx context.Context, cursor string) (snaps []reconcile.Snapshot, next string, more bool, err error) {
	attempt.Timed(ctx, &c.listLatency, func(ctx context.Context) { snaps, next, more, err = c.listPage(ctx, cursor) })
	return snaps, next, more, err
}

func (c *Client) listPage(ctx context.Context, cursor string) (snaps []reconcile.Snapshot, next string, more bool, err error) {
	cur, err := parseListCursor(cursor)
	if err != nil {
		return nil, "", false, err
	}
	ctx = context.WithValue(ctx, listLimiterKey{}, c.listLimiter)
	op := "list customers " + cur.String()
	q := cur.query(listPageSize)
	q.Set("expand[0]", "data.subscriptions")
	body, err := c.get(ctx, "/v1/customers", q)
	if err != nil {
		return nil, "", false, fail(op, err)
	}
	customers, hasMore, err := listPageOf[customerObject](body)
	if err != nil {
		return nil, "", false, fmt.Errorf("stripe %s: unreadable page: %w", op, err)
	}
	snaps = make([]reconcile.Snapshot, 0, len(customers)) // the caller may keep each page's slice
	for _, o := range customers {
		cust, err := o.read(c.userRefKey)
		snap := reconcile.Snapshot{}
		if err == nil {
			snap, err = c.resolve(ctx, cust)
		}
		switch {
		case err == nil:
			snaps = append(snaps, snap)
		case reconcile.IsPermanent(err):
			if !o.ID.ok {
				return nil, "", false, reconcile.Permanent("stripe customer list: an entry has no id")
			}
			c.log.WarnContext(ctx, "stripe customer left out of the sweep listing", "customer", o.ID.s, slog.Any("error", err))
		default:
			return nil, "", false, err
		}
		cur.passed(o)
	}
	if len(customers) > 0 {
		cur.Pages++
	}
	if cur.To == 0 && cur.Ceil == 0 {
		cur.Ceil = cur.Top // the newest part: the list's newest creation, which every part split off carries
	}
	return snaps, cur.encode(), hasMore && len(customers) > 0, nil
}

// Split divides the part of the list that remains after a page in two by
// creation time: the part keeps the newer half and gives away the older
// one. A part that reaches back to the list's beginning (no lower bound)
// first learns where the oldest customer is, with a few one-customer
// requests; that bound only places the split (the part given keeps no
// lower bound, so a customer created later with an older date is still
// listed). A part is not divided before it has listed a page (the list
// itself, splitAfterPages), nor when what remains of it is under two pages
// at the density it has listed, or within one second; and the list is not
// divided at all when, at its first split, no more is left of it than was
// listed (an account of a few pages is listed one page at a time, for one
// request more). kept is never empty: next, or next with the bound learnt.
func (c *Client) Split(ctx context.Context, next string) (kept, given string, err error) {
	cur, err := parseListCursor(next)
	if err != nil || cur.After == "" || cur.At <= 0 || cur.Top < cur.At || cur.Pages < cur.splitAfter() {
		return next, "", err // too little listed to judge, or nothing known to split by
	}
	// What remains is [low, At]; the part listed Pages pages over [At, Top].
	listed := cur.Top - cur.At + 1
	low := cmp.Or(cur.From, cur.Floor)
	if low == 0 {
		if low, err = c.oldest(ctx, cur); err != nil {
			return "", "", err
		}
		cur.Floor = low
		if cur.At-low <= listed {
			return cur.encode(), "", nil // no more left than listed: a small account, listed whole
		}
	}
	remaining := float64(cur.At-low+1) * float64(cur.Pages) / float64(listed)
	mid := low + (cur.At-low+1)/2
	if remaining < 2 || mid <= low || mid > cur.At {
		return cur.encode(), "", nil
	}
	g := listCursor{From: cur.From, To: mid, Floor: cur.Floor, Ceil: cur.Ceil}
	k := cur
	k.From = mid
	return k.encode(), g.encode(), nil
}

// splitAfterPages is how many pages the list lists before Split first
// divides it.
const splitAfterPages = 2

// splitAfter is how many pages the part lists before Split divides it: a
// part split off the list (its bounds known) once it has one page to
// judge its density by, the list itself after splitAfterPages.
func (cur listCursor) splitAfter() int64 {
	if cur.From > 0 || cur.Floor > 0 {
		return 1
	}
	return splitAfterPages
}

// oldest returns a second no later than the creation of the oldest
// customer the part has yet to list. It asks whether any customer is older
// than the span the part has listed (if not, that is the answer, and Split
// leaves the list whole), and further back by doubling steps, until
// nothing is older; then it places the oldest within an eighth of the last
// step. Each look is one request of one customer. The first round is the
// one look that settles a small account; the second looks farRound steps
// further back at once (2^11 spans: a first page of a day's sign-ups
// reaches back years), the next ones probeRound at a time: the sweep's
// parts wait for the answer, and each round is a round trip.
func (c *Client) oldest(ctx context.Context, cur listCursor) (int64, error) {
	ctx = context.WithValue(ctx, listLimiterKey{}, c.listLimiter)
	span := cur.Top - cur.At + 1
	back := func(j int) int64 { return max(cur.At-span<<(j-1), 1) } // the j-th point looked at, going back
	round := func(first int) int {
		if first == 2 {
			return farRound
		}
		return probeRound
	}
	for first, n := 1, 1; ; first, n = first+n, round(first+n) {
		points := make([]int64, 0, n)
		for j := first; j < first+n && (j == first || points[len(points)-1] > 1); j++ {
			points = append(points, back(j))
		}
		empty, err := c.noneBefore(ctx, points)
		if err != nil {
			return 0, err
		}
		for i, e := range empty {
			switch {
			case e && first+i == 1:
				return points[i], nil
			case e:
				return c.narrow(ctx, points[i], back(first+i-1))
			case points[i] == 1:
				return 1, nil
			}
		}
	}
}

// narrow returns the latest of seven points evenly between low and high
// (and low) before which no customer was created: low is such a point,
// high is not.
func (c *Client) narrow(ctx context.Context, low, high int64) (int64, error) {
	points := make([]int64, 7)
	for k := range points {
		points[k] = low + (high-low)*int64(k+1)/8
	}
	empty, err := c.noneBefore(ctx, points)
	if err != nil {
		return 0, err
	}
	for k, e := range empty {
		if e {
			low = points[k]
		}
	}
	return low, nil
}

// farRound and probeRound are how many one-customer requests oldest sends
// at once, in its second round and in each one after it.
const (
	farRound   = 11
	probeRound = 4
)

// noneBefore reports, for each second, whether no customer was created
// before it, asking for them all at once.
func (c *Client) noneBefore(ctx context.Context, seconds []int64) ([]bool, error) {
	empty := make([]bool, len(seconds))
	errs := make([]error, len(seconds))
	var wg sync.WaitGroup
	for i, sec := range seconds {
		wg.Go(func() {
			probe := listCursor{To: sec}
			body, err := c.get(ctx, "/v1/customers", probe.query(1))
			if err != nil {
				errs[i] = fail("find the oldest customer "+probe.String(), err)
				return
			}
			customers, _, err := listPageOf[customerObject](body)
			if err != nil {
				errs[i] = fmt.Errorf("stripe find the oldest customer: unreadable page: %w", err)
				return
			}
			empty[i] = len(customers) == 0
		})
	}
	wg.Wait()
	return empty, errors.Join(errs...)
}

// listCursor is where a part of the customer list stands: the customers
// created in [From, To) (0: unbounded), newest first, after the customer
// After. What Split needs rides along: At is After's creation, Top the
// newest creation the part listed and Pages how many pages it listed (its
// density), Floor where the oldest customer was found; Ceil, the list's
// newest creation, rides along for Progress.
type listCursor struct {
	After        string
	At, Top      int64
	From, To     int64
	Pages, Floor int64
	Ceil         int64
}

// passed moves the cursor past a listed customer.
func (cur *listCursor) passed(o customerObject) {
	cur.After = o.ID.s
	cur.At = 0
	if o.Created.ok {
		cur.At = o.Created.t.Unix()
	}
	if cur.Top == 0 {
		cur.Top = cur.At
	}
}

// query is the list request's paging and range.
func (cur listCursor) query(limit int) url.Values {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if cur.After != "" {
		q.Set("starting_after", cur.After)
	}
	if cur.From > 0 {
		q.Set("created[gte]", strconv.FormatInt(cur.From, 10))
	}
	if cur.To > 0 {
		q.Set("created[lt]", strconv.FormatInt(cur.To, 10))
	}
	return q
}

// String describes the cursor for errors and logs.
func (cur listCursor) String() string {
	s := "after " + cmp.Or(cur.After, "the start")
	if cur.From > 0 || cur.To > 0 {
		s += fmt.Sprintf(" created in [%d, %d)", cur.From, cur.To)
	}
	return s
}

// countFields name listCursor's counts in its encoding, in counts' order.
var countFields = []string{"at", "top", "from", "to", "pages", "floor", "ceil"}

// counts are the cursor's numbers, in countFields' order.
func (cur *listCursor) counts() []*int64 {
	return []*int64{&cur.At, &cur.Top, &cur.From, &cur.To, &cur.Pages, &cur.Floor, &cur.Ceil}
}

// encode writes the cursor as a query string ("after=cus_…&at=…"); a
// cursor of the whole list after a customer, known nothing else of, is
// the customer id alone, as earlier versions wrote it.
func (cur listCursor) encode() string {
	if cur == (listCursor{After: cur.After}) {
		return cur.After
	}
	v := url.Values{}
	if cur.After != "" {
		v.Set("after", cur.After)
	}
	for i, n := range cur.counts() {
		if *n != 0 {
			v.Set(countFields[i], strconv.FormatInt(*n, 10))
		}
	}
	return v.Encode()
}

// parseListCursor reads what encode wrote.
func parseListCursor(s string) (listCursor, error) {
	if !strings.Contains(s, "=") {
		return listCursor{After: s}, nil
	}
	v, err := url.ParseQuery(s)
	if err != nil {
		return listCursor{}, fmt.Errorf("stripe list: unreadable cursor %q: %w", s, err)
	}
	cur := listCursor{After: v.Get("after")}
	for i, p := range cur.counts() {
		if f := v.Get(countFields[i]); f != "" {
			if *p, err = strconv.ParseInt(f, 10, 64); err != nil || *p < 0 {
				return listCursor{}, fmt.Errorf("stripe list: unreadable cursor %q: %s is not a count", s, countFields[i])
			}
		}
	}
	for k := range v {
		if k != "after" && !slices.Contains(countFields, k) {
			return listCursor{}, fmt.Errorf("stripe list: unreadable cursor %q: unknown %q", s, k)
		}
	}
	return cur, nil
}

// Progress estimates the share of the customer list a run has listed from
// the cursors of its parts not ended (reconcile.Progresser): one minus the
// share of the list's span of creation times, [Floor, Ceil], that the
// parts have yet to list. It measures time, not customers: a list whose
// sign-ups were uneven over time moves faster or slower than it says. -1
// until the span is known (Split learns Floor: a list of a few pages is
// never split, and its progress stays unknown) or when a cursor is
// unreadable.
func (c *Client) Progress(cursors []string) float64 {
	var floor, ceil, left int64
	parts := make([]listCursor, 0, len(cursors))
	for _, s := range cursors {
		cur, err := parseListCursor(s)
		if err != nil {
			return -1
		}
		floor, ceil = max(floor, cur.Floor), max(ceil, cur.Ceil)
		parts = append(parts, cur)
	}
	if floor <= 0 || ceil < floor {
		return -1
	}
	for _, cur := range parts {
		low := max(cmp.Or(cur.From, cur.Floor, floor), floor)
		high := ceil
		switch {
		case cur.At > 0:
			high = cur.At // listed down to At
		case cur.To > 0:
			high = cur.To - 1 // not begun
		}
		left += max(min(high, ceil)-low+1, 0)
	}
	span := ceil - floor + 1
	return 1 - min(float64(left)/float64(span), 1)
}

var _ reconcile.Progresser = (*Client)(nil)
