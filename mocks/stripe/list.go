package stripemock

import "sort"

// listParams are the paging parameters every list endpoint takes.
var listParams = []string{"limit", "starting_after", "ending_before"}

// listPage cuts one page out of rows (already filtered, newest first) the way
// Stripe pages: limit 1–100 (default 10), starting_after = the last id of the
// previous page, ending_before = the first id of the next page.
func listPage[T row](c *call, rows []T, lookup func(string) (T, bool), noun string, render func(T) obj) (obj, error) {
	limit := int64(10)
	if n, ok, err := c.form.integer("limit"); err != nil {
		return nil, err
	} else if ok {
		if n < 1 || n > 100 {
			return nil, invalidParam("limit", "Invalid limit: must be between 1 and 100")
		}
		limit = n
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
		start = max(start, end-int(limit))
		return listObject(c, rows[start:end], start > 0, render), nil
	}
	stop := min(end, start+int(limit))
	return listObject(c, rows[start:stop], stop < end, render), nil
}

func listObject[T any](c *call, page []T, hasMore bool, render func(T) obj) obj {
	data := make([]obj, 0, len(page))
	for _, v := range page {
		data = append(data, render(v))
	}
	return obj{"object": "list", "data": data, "has_more": hasMore, "url": c.r.URL.Path}
}
