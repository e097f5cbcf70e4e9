package app

import (
	"errors"
	"testing"
)

// FuzzParseOverride: whatever the body of PUT /api/admin/limits/claim,
// parseOverride returns without panicking, refuses with an errOverride
// (whose text is the 400's message), and what it accepts names at most
// one of a plan and a user, a user id ginlimit can count, and a window
// that converts to a time.Duration.
func FuzzParseOverride(f *testing.F) {
	for _, s := range []string{
		`{"limit": 5, "window_seconds": 60}`,
		`{"limit": 0}`,
		`{"limit": 10, "plan": "vip"}`,
		`{"limit": 10, "user": "alice", "window_seconds": 3600}`,
		`{"limit": 10, "plan": "vip", "user": "alice"}`,
		`{"limit": 1e30}`, `{"window_seconds": -1}`, `{"window_seconds": 9223372037}`,
		`{"limit": 5}{"limit": 6}`, `{"limit": 5, "extra": 1}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := parseOverride(body)
		if err != nil {
			var e errOverride
			if !errors.As(err, &e) || e == "" {
				t.Fatalf("%q: error %v is not a message for the client", body, err)
			}
			return
		}
		if o.Plan != "" && o.User != "" {
			t.Fatalf("%q: accepted a plan and a user", body)
		}
		if len(o.User) > MaxAdminUserIDLen || o.WindowSeconds < 0 || o.WindowSeconds > 9223372036 {
			t.Fatalf("%q: accepted %+v", body, o)
		}
	})
}
