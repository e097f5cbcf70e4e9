package app

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ginlimit/ginlimit/identity"
)

// FuzzLoginBody: whatever the body of POST /api/login, parseLogin returns
// without panicking and refuses with an errLogin (whose text is the 400's
// message, never the body's); a user id it accepts is 1 to MaxUserIDLen
// bytes, and the token login signs for it verifies back to that very id.
func FuzzLoginBody(f *testing.F) {
	for _, s := range []string{
		`{"user_id":"alice"}`, `{"user_id":"alice","plan":"vip","role":"admin"}`, `{"USER_ID":"alice"}`,
		`{"user_id":""}`, `{"user_id":null}`, `{"user_id":42}`, `{"user_id":"\u0000\ud800"}`,
		`{"user_id":"a"}{"user_id":"b"}`, `null`, `[]`, `"alice"`, ``,
	} {
		f.Add([]byte(s))
	}
	secret := []byte(DevJWTSecret)
	users, err := identity.NewJWT(identity.HMACSecret(secret), identity.Algorithms("HS256"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, err := parseLogin(body)
		if err != nil {
			var e errLogin
			if !errors.As(err, &e) || e == "" {
				t.Fatalf("%q: error %v is not a message for the client", body, err)
			}
			return
		}
		if id == "" || len(id) > MaxUserIDLen {
			t.Fatalf("%q: accepted the user id %q", body, id)
		}
		tok, err := NewToken(secret, id, Grants{}, time.Now())
		if err != nil {
			t.Fatalf("%q: no token for %q: %v", body, id, err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if got, err := users.Verify(r); err != nil || got != id {
			t.Fatalf("%q: the token of %q verifies as %q, %v", body, id, got, err)
		}
	})
}
