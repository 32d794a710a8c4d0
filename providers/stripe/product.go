package stripe

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/billsync/billsync/reconcile"
)

// A plans file may map a price by its product's metadata
// (reconcile.ProductPlanKey: a Connect platform marks the products it
// creates in its accounts with billsync_plan: pro). A subscription item's
// price names its product by id only, and expanding it is too deep on
// every read billsync makes: Stripe expands at most four levels, and the
// product sits at subscriptions.data.items.data.price.product of a
// retrieved customer (data.subscriptions.… of a listed one, and
// data.items.data.price.product of the subscription list is refused too).
// So the product is retrieved (GET /v1/products/{id}, in the item's
// account) and its plan kept in a cache per (account, product): at most
// one read per product and account a day (an hour for a product that
// names no plan), whatever the number of reconciles. Only a client told
// to (Config.ProductPlans, set when the plans file maps products) reads
// products: otherwise a reconcile reads what it always did.

// Product cache bounds. A product's plan is read again after productTTL:
// platforms mark a product when they create it and rarely change it. A
// product that names no plan (an add-on, or one marked late) is read
// again after productMissTTL, so a subscriber left unmapped gets its plan
// within the hour of the platform marking it. At most productCacheSize
// products are kept (a Connect platform's accounts times their products;
// past it, expired entries go first, then any).
const (
	productTTL       = 24 * time.Hour
	productMissTTL   = time.Hour
	productCacheSize = 10_000
)

// productCache keeps the plan each product's metadata says, by connected
// key (reconcile.Connected(account, product id)); "" for a product
// without one. Safe for concurrent use.
type productCache struct {
	mu  sync.Mutex
	now func() time.Time
	// ttl is how long a product's plan is kept, missTTL how long a
	// product without one is.
	ttl, missTTL time.Duration
	size         int
	entries      map[string]productEntry
}

type productEntry struct {
	plan string
	read time.Time
}

func newProductCache(now func() time.Time, ttl, missTTL time.Duration, size int) *productCache {
	return &productCache{now: now, ttl: ttl, missTTL: missTTL, size: size, entries: map[string]productEntry{}}
}

// expired reports whether e is to be read again at now.
func (pc *productCache) expired(e productEntry, now time.Time) bool {
	ttl := pc.ttl
	if e.plan == "" {
		ttl = pc.missTTL
	}
	return now.Sub(e.read) >= ttl
}

// get returns the product's plan unless it is to be read again.
func (pc *productCache) get(key string) (plan string, ok bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	e, ok := pc.entries[key]
	if !ok || pc.expired(e, pc.now()) {
		return "", false
	}
	return e.plan, true
}

// put keeps the product's plan, read now; when the cache is full, the
// expired entries are dropped, and if none was, one entry (Go's map order
// picks it).
func (pc *productCache) put(key, plan string) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	now := pc.now()
	if _, kept := pc.entries[key]; !kept && len(pc.entries) >= pc.size {
		for k, e := range pc.entries {
			if pc.expired(e, now) {
				delete(pc.entries, k)
			}
		}
		for k := range pc.entries {
			if len(pc.entries) < pc.size {
				break
			}
			delete(pc.entries, k)
		}
	}
	pc.entries[key] = productEntry{plan: plan, read: now}
}

// len is how many products are kept.
func (pc *productCache) len() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.entries)
}

// readProductPlans sets each item's Product and, when the client reads
// product plans, its ProductPlan: from the product the answer expanded,
// else the cache, else one read of the product in ctx's account. subs
// and items are what snap's subscriptions were read from (see
// subscriptionsWithItems).
func (c *Client) readProductPlans(ctx context.Context, snap *reconcile.Snapshot, subs []object, items map[string][]object) error {
	if c.products == nil {
		return nil
	}
	bySub := make(map[string][]productRef, len(subs))
	for _, o := range subs {
		its := o.Items.Data
		if listed := items[o.ID.s]; listed != nil {
			its = listed
		}
		for _, it := range linesOf(o, its) {
			bySub[o.ID.s] = append(bySub[o.ID.s], productOf(it))
		}
	}
	for i := range snap.Subscriptions {
		sub := &snap.Subscriptions[i]
		refs := bySub[sub.ID]
		for j := range sub.Items {
			if j >= len(refs) || !refs[j].id.ok {
				continue
			}
			it := &sub.Items[j]
			it.Product = refs[j].id.s
			if refs[j].expanded {
				it.ProductPlan = refs[j].plan.s
				continue
			}
			plan, err := c.productPlan(ctx, it.Product)
			if err != nil {
				return err
			}
			it.ProductPlan = plan
		}
	}
	return nil
}

// productPlan returns the plan the product's metadata says ("" for
// none), from the cache or read (GET /v1/products/{id}) in ctx's
// account. A product Stripe does not know has none (cached too); any
// other failure fails the read: the plan might hang on it.
func (c *Client) productPlan(ctx context.Context, productID string) (string, error) {
	key := connectedKey(ctx, productID)
	if plan, ok := c.products.get(key); ok {
		return plan, nil
	}
	body, err := c.get(ctx, "/v1/products/"+url.PathEscape(productID), nil)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Code == codeResourceMissing:
		c.products.put(key, "")
		return "", nil
	case err != nil:
		return "", fail("retrieve product "+productID, err)
	}
	var p product
	if err := readAnswer(body, &p); err != nil {
		return "", fail("retrieve product "+productID, err)
	}
	plan := p.Metadata[reconcile.ProductPlanKey].s
	c.products.put(key, plan)
	return plan, nil
}
