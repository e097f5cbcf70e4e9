package app

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzSignInForm: whatever the body of the console's sign-in form,
// parseSignIn returns without panicking, and a token it accepts is
// non-empty, made only of the characters of a JWT (so nothing else reaches
// a header or a cookie), and what the form would send for it.
func FuzzSignInForm(f *testing.F) {
	for _, s := range []string{
		"token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2ln", "token=a.b.c%0A", "token=", "token=a&token=b",
		"token=a&other=b", "TOKEN=a", "token=%3Cscript%3E", "token=a%3Bb", "token=%zz", "", "&&&", "token=a;b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		tok, ok := parseSignIn(body)
		if !ok {
			if tok != "" {
				t.Fatalf("%q: refused, yet returned %q", body, tok)
			}
			return
		}
		if tok == "" || strings.Trim(tok, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
			t.Fatalf("%q: accepted the token %q", body, tok)
		}
		if again, ok := parseSignIn(url.Values{"token": {tok}}.Encode()); !ok || again != tok {
			t.Fatalf("%q: the form's own encoding of %q reads as %q, %v", body, tok, again, ok)
		}
	})
}
