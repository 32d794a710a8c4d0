package stripemock

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
		for start < end && rows[start].order() >= cursor.order() {
			start++
		}
	}
	if id, ok := c.form.str("ending_before"); ok && id != "" {
		cursor, found := lookup(id)
		if !found {
			return nil, noSuch(noun, id, "ending_before")
		}
		end = start
		for end < len(rows) && rows[end].order() > cursor.order() {
			end++
		}
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
