package stripe

import "sort"

// listParams are the paging parameters every list endpoint takes.
var listParams = []string{"limit", "starting_after", "ending_before"}

// listPage cuts one page out of rows (already filtered, newest first) the way
// Stripe pages: limit 1–100 (default 10), starting_after = the last id of the
// previous page, ending_before = the first id of the next page.
func listPage[T row](c *call, rows []T, lookup func(string) (T, bool), noun string, render func(T) obj) (obj, error) {
	limit, err := pageLimit(c)
	if err != nil {
		return nil, err
	}
	start, end := 0, len(rows)
	if id, ok := c.form.str("starting_after"); ok && id != "" {
		cursor, found := lookup(id)
		if !found {
			return nil, noSuch(noun, id, "starting_after")
		}
		// Rows are newest first: the cursor's place is found by bisection,
		// so a page deep in a long list costs no more than the first.
		start = sort.Search(end, func(i int) bool { return rows[i].order() < cursor.order() })
	}
	if id, ok := c.form.str("ending_before"); ok && id != "" {
		cursor, found := lookup(id)
		if !found {
			return nil, noSuch(noun, id, "ending_before")
		}
		end = start + sort.Search(len(rows)-start, func(i int) bool { return rows[start+i].order() <= cursor.order() })
		start = max(start, end-limit)
		return listObject(c, rows[start:end], start > 0, render), nil
	}
	stop := min(end, start+limit)
	return listObject(c, rows[start:stop], stop < end, render), nil
}

// listTable is listPage over every row of t that keep accepts, without
// filtering and copying the whole table first: it walks back from the
// cursor's place until the page is full (and one row more, for has_more),
// so a page of a long list costs about its own rows. ending_before, which
// pages the other way, goes through listPage.
func listTable[T row](c *call, t *table[T], keep func(T) bool, noun string, render func(T) obj) (obj, error) {
	if id, ok := c.form.str("ending_before"); ok && id != "" {
		return listPage(c, t.newestFirst(keep), t.get, noun, render)
	}
	limit, err := pageLimit(c)
	if err != nil {
		return nil, err
	}
	end := len(t.rows) // t.rows is oldest first; the page is the newest rows before end
	if id, ok := c.form.str("starting_after"); ok && id != "" {
		cursor, found := t.get(id)
		if !found {
			return nil, noSuch(noun, id, "starting_after")
		}
		end = sort.Search(len(t.rows), func(i int) bool { return t.rows[i].order() >= cursor.order() })
	}
	var page []T
	i := end - 1
	for ; i >= 0 && len(page) < limit; i-- {
		if keep(t.rows[i]) {
			page = append(page, t.rows[i])
		}
	}
	hasMore := false
	for ; i >= 0 && !hasMore; i-- {
		hasMore = keep(t.rows[i])
	}
	return listObject(c, page, hasMore, render), nil
}

// pageLimit reads limit: 1–100, default 10.
func pageLimit(c *call) (int, error) {
	n, ok, err := c.form.integer("limit")
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 10, nil
	case n < 1 || n > 100:
		return 0, invalidParam("limit", "Invalid limit: must be between 1 and 100")
	}
	return int(n), nil
}

func listObject[T any](c *call, page []T, hasMore bool, render func(T) obj) obj {
	data := make([]obj, 0, len(page))
	for _, v := range page {
		data = append(data, render(v))
	}
	return obj{"object": "list", "data": data, "has_more": hasMore, "url": c.r.URL.Path}
}
