package kinde

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/billsync/billsync/reconcile"
)

// TestParseTime: every form RFC 3339 allows, and offsets of hours only,
// read as the instant they name; what names no instant is refused.
func TestParseTime(t *testing.T) {
	utc := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time // zero: refused
	}{
		{"2026-11-30T12:00:05Z", utc},
		{"2026-11-30t12:00:05z", utc},
		{"2026-11-30t12:00:05Z", utc},
		{"2026-11-30T12:00:05z", utc},
		{"2026-11-30 12:00:05Z", utc},
		{"2026-11-30 12:00:05z", utc},
		{"2026-11-30T12:00:05+00:00", utc},
		{"2026-11-30T12:00:05-00:00", utc},
		{"2026-11-30T12:00:05+00", utc},
		{"2026-11-30T12:00:05-00", utc},
		{"2026-11-30T07:00:05-05", utc},
		{"2026-11-30T17:30:05+05:30", utc},
		{"2026-11-30 07:00:05-05", utc},
		{"2026-11-30t14:00:05+02", utc},
		{"2026-11-30T12:00:05.5Z", utc.Add(500 * time.Millisecond)},
		{"2026-11-30T12:00:05.123456789Z", utc.Add(123456789)},
		{"2026-11-30T12:00:05.123456789012z", utc.Add(123456789)},
		{"2026-11-30T07:00:05.25-05", utc.Add(250 * time.Millisecond)},
		{"2026-12-31T23:59:60Z", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-12-31T15:59:60-08:00", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},

		{"", time.Time{}},
		{"2026-11-30", time.Time{}},
		{"2026-11-30T12:00:05", time.Time{}},   // no offset: local to whom?
		{"2026-11-30T12:00:05+5", time.Time{}}, // one digit
		{"2026-11-30T12:00:05+0500", time.Time{}},
		{"2026-11-30x12:00:05Z", time.Time{}},
		{"2026-11-30T12:00:05Zz", time.Time{}},
		{"2026-11-30T12:00:61Z", time.Time{}},
		{"2026-11-30T12:00:05.Z", time.Time{}},
		{"1764504005", time.Time{}},
		{"30 Nov 2026 12:00:05 GMT", time.Time{}},
	} {
		got, ok := parseTime(c.in)
		if c.want.IsZero() {
			require.False(t, ok, "%q read as %s", c.in, got)
			continue
		}
		require.True(t, ok, c.in)
		require.Equal(t, c.want, got, c.in)
		require.Equal(t, time.UTC, got.Location(), c.in)
	}
}

// TestParseClaimsReadsEveryTimeForm: a token whose times use any of these
// forms is accepted, dated by its event_timestamp; an event_timestamp no
// reading can parse falls back to the timestamp.
func TestParseClaimsReadsEveryTimeForm(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	changed := now.Add(-time.Minute)
	for _, form := range []string{"2006-01-02T15:04:05Z07:00", "2006-01-02t15:04:05z", "2006-01-02 15:04:05Z07:00",
		"2006-01-02T15:04:05-07", "2006-01-02 15:04:05.000000-07"} {
		for _, zone := range []*time.Location{time.UTC, time.FixedZone("", -5*3600)} {
			if strings.HasSuffix(form, "z") && zone != time.UTC {
				continue
			}
			claims := `{"type":"customer.plan_changed","event_id":"e_1","data":{"customer_id":"c_1"},` +
				`"timestamp":"` + now.In(zone).Format(form) + `","event_timestamp":"` + changed.In(zone).Format(form) + `"}`
			ev, err := parseClaims([]byte(claims), now, DefaultReplayWindow)
			require.NoError(t, err, claims)
			require.Equal(t, changed, ev.Time, claims)
			require.Equal(t, "c_1", ev.CustomerID)
			require.Empty(t, ev.IgnoreReason)
		}
	}
	ev, err := parseClaims([]byte(`{"type":"customer.plan_changed","data":{"customer_id":"c_1"},`+
		`"timestamp":"2026-11-30 12:00:05z","event_timestamp":"yesterday"}`), now, DefaultReplayWindow)
	require.NoError(t, err)
	require.Equal(t, now, ev.Time, "an unreadable event_timestamp falls back to the timestamp")
	_, err = parseClaims([]byte(`{"type":"customer.plan_changed","timestamp":"yesterday"}`), now, DefaultReplayWindow)
	require.ErrorContains(t, err, "no readable timestamp", "the replay window needs the signed time")
}

// FuzzParseTime: parseTime reads everything Go's RFC 3339 reader reads, as
// the same instant, and whatever it reads is one UTC instant that prints
// and reads back. Seeds are in testdata/fuzz/FuzzParseTime.
func FuzzParseTime(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseTime(s)
		if strict, err := time.Parse(time.RFC3339Nano, s); err == nil {
			require.True(t, ok, "%q is RFC 3339 to Go", s)
			require.True(t, strict.Equal(got), "%q: %s, Go reads %s", s, got, strict)
		}
		if !ok {
			require.True(t, got.IsZero())
			return
		}
		require.Equal(t, time.UTC, got.Location())
		back, err := time.Parse(time.RFC3339Nano, got.Format(time.RFC3339Nano))
		require.NoError(t, err)
		require.True(t, back.Equal(got))
	})
}

// FuzzParseClaims: whatever claims a valid signature covers, parseClaims
// refuses them only for the replay window (a timestamp that is absent,
// unreadable, too old or in the future), and otherwise returns an event
// the store can hold. Seeds (the time forms among them) are in
// testdata/fuzz/FuzzParseClaims.
func FuzzParseClaims(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, claims []byte) {
		ev, err := parseClaims(claims, now, DefaultReplayWindow)
		if err != nil {
			require.Regexp(t, "timestamp|not a JSON object", err.Error())
			return
		}
		require.NotEmpty(t, ev.DedupeKey)
		require.True(t, ev.Time.IsZero() || reconcile.SaneEventTime(ev.Time))
		require.True(t, ev.Time.IsZero() || ev.Time.Location() == time.UTC)
		require.LessOrEqual(t, len(ev.CustomerID), reconcile.MaxFieldBytes)
		require.NotContains(t, ev.CustomerID+ev.Type+ev.EventID+ev.DedupeKey, "\x00")
	})
}
