package ginlimit

import (
	"bytes"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
	"github.com/ginlimit/ginlimit/identity"
)

// sfItems parses the RateLimit or RateLimit-Policy field of h with a
// structured-field parser, as a List of Items, each by its policy name.
func sfItems(t *testing.T, h http.Header, field string) map[string]*httpsfv.Params {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values(field))
	if err != nil {
		t.Fatalf("%s %q is no structured-field List: %v", field, h.Values(field), err)
	}
	items := map[string]*httpsfv.Params{}
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s %q: a member is %T, want an Item", field, h.Values(field), m)
		}
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s %q: an item is %T, want a String (the policy's name)", field, h.Values(field), it.Value)
		}
		items[name] = it.Params
	}
	return items
}

// param returns the parameter k of ps, failing t when it is not of type T.
func param[T any](t *testing.T, ps *httpsfv.Params, k string) (T, bool) {
	t.Helper()
	var zero T
	v, ok := ps.Get(k)
	if !ok {
		return zero, false
	}
	x, ok := v.(T)
	if !ok {
		t.Fatalf("parameter %s is %T, want %T", k, v, zero)
	}
	return x, true
}

const pkSecret = "0123456789abcdef0123456789abcdef"

// TestHeadersStructuredFields: RateLimit and RateLimit-Policy parse as the
// draft's Lists of Items, with r, t, q and w Integers; a rule that hashes
// the identity it counts sends pk, a Byte Sequence: the 128-bit HMAC that
// stands for the identity in the key, the same on two instances with the
// secret, different for another client, never the identity; a rule
// without a secret, or that counts no one, sends none; an in-flight rule's
// policy has qu="concurrent-requests".
func TestHeadersStructuredFields(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	pfx := prefix(t)
	users := map[string]string{"alice": "alice@example.com", "bob": "bob@example.com"}
	byHeader := UserIdentity(headerUser("X-User"))
	opts := []Option{Redis(c), DenyCache(0),
		Rule(Name("per-user"), Key(pfx+"u:"), Limit(5), Per(User), byHeader, HashIdentities([]byte(pkSecret))),
		Rule(Name("plain"), Key(pfx+"p:"), Limit(7), Per(User), byHeader),
		Rule(Name("route"), Key(pfx+"r:"), Limit(9)),
		Rule(Name("slots"), Key(pfx+"s:"), InFlight(2, time.Minute), Per(User), byHeader, HashIdentities([]byte(pkSecret))),
	}
	instance := func() (*gin.Engine, *Policy) {
		p := mustPolicy(t, opts...)
		e := gin.New()
		e.GET("/x", p.route.Serve, ok)
		return e, p
	}
	a, pa := instance()
	b, _ := instance()
	pks := map[string][]byte{}
	for _, user := range []string{"alice", "bob"} {
		for i, e := range []*gin.Engine{a, b} {
			w := do(e, http.MethodGet, "/x", map[string]string{"X-User": users[user]})
			h := w.Header()
			for _, field := range []string{"RateLimit", "RateLimit-Policy"} {
				if strings.Contains(strings.Join(h.Values(field), ","), users[user]) || strings.Contains(strings.Join(h.Values(field), ","), user) {
					t.Fatalf("%s %q names the user", field, h.Values(field))
				}
			}
			rl, pol := sfItems(t, h, "RateLimit"), sfItems(t, h, "RateLimit-Policy")
			for _, name := range []string{"per-user", "plain", "route"} {
				if _, ok := param[int64](t, rl[name], "r"); !ok {
					t.Fatalf("RateLimit %q: %s has no r", h.Values("RateLimit"), name)
				}
				if _, ok := param[int64](t, rl[name], "t"); !ok {
					t.Fatalf("RateLimit %q: %s has no t", h.Values("RateLimit"), name)
				}
				if q, ok := param[int64](t, pol[name], "q"); !ok || q < 5 {
					t.Fatalf("RateLimit-Policy %q: %s has q %d", h.Values("RateLimit-Policy"), name, q)
				}
			}
			pk, ok := param[[]byte](t, rl["per-user"], "pk")
			ppk, pok := param[[]byte](t, pol["per-user"], "pk")
			if !ok || !pok || len(pk) != 16 || !bytes.Equal(pk, ppk) {
				t.Fatalf("per-user: RateLimit pk %x (%v), RateLimit-Policy pk %x (%v): want the same 16 bytes in both", pk, ok, ppk, pok)
			}
			if want := pks[user]; i == 1 && !bytes.Equal(pk, want) {
				t.Fatalf("%s's pk is %x on one instance and %x on the other", user, want, pk)
			}
			pks[user] = pk
			for _, name := range []string{"plain", "route"} {
				if _, ok := param[[]byte](t, rl[name], "pk"); ok {
					t.Fatalf("RateLimit %q: %s sends a pk without a secret or an identity", h.Values("RateLimit"), name)
				}
				if _, ok := param[[]byte](t, pol[name], "pk"); ok {
					t.Fatalf("RateLimit-Policy %q: %s sends a pk without a secret or an identity", h.Values("RateLimit-Policy"), name)
				}
			}
			if qu, ok := param[string](t, pol["slots"], "qu"); !ok || qu != "concurrent-requests" {
				t.Fatalf("RateLimit-Policy %q: the in-flight rule's qu is %q, want concurrent-requests", h.Values("RateLimit-Policy"), qu)
			}
			if _, ok := param[int64](t, pol["slots"], "w"); ok {
				t.Fatalf("RateLimit-Policy %q: the in-flight rule has a window", h.Values("RateLimit-Policy"))
			}
			if _, ok := param[string](t, pol["per-user"], "qu"); ok {
				t.Fatalf("RateLimit-Policy %q: a rate rule has a qu (the default, requests, goes unsaid)", h.Values("RateLimit-Policy"))
			}
		}
	}
	if bytes.Equal(pks["alice"], pks["bob"]) {
		t.Fatal("alice and bob have one pk")
	}
	// The pk is the identity's hash in the key, so support can match a
	// client's pk with its count.
	var w rule.Who
	w.Add("user", users["alice"], rule.IDSafe)
	pa.route.Rules[0].Seal(&w)
	if got := hex.EncodeToString(pks["alice"]); got != w.Parts[0].Value {
		t.Fatalf("alice's pk is %s, want the hash in her key, %s", got, w.Parts[0].Value)
	}
}

// TestHeadersStructuredFieldsInFlight: a refusal by an in-flight rule
// answers with its own RateLimit item, whose pk is its partition's, and
// a policy with qu; the refusals and a route with one rule parse too.
func TestHeadersStructuredFieldsInFlight(t *testing.T) {
	t.Parallel()
	_, c := newMini(t)
	p := mustPolicy(t, Redis(c), Key(prefix(t)), InFlight(1, time.Minute), Per(User), UserIdentity(headerUser("X-User")),
		HashIdentities([]byte(pkSecret)))
	gate := make(chan struct{})
	entered := make(chan struct{})
	e := gin.New()
	e.GET("/x", p.route.Serve, func(c *gin.Context) {
		if c.Query("hold") != "" {
			close(entered)
			<-gate
		}
		c.Status(http.StatusOK)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		do(e, http.MethodGet, "/x?hold=1", map[string]string{"X-User": "carol"})
	}()
	<-entered
	w := do(e, http.MethodGet, "/x", map[string]string{"X-User": "carol"})
	close(gate)
	<-done
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request while the slot is held: %d, want 429", w.Code)
	}
	name := p.route.Slots[0].Name
	rl, pol := sfItems(t, w.Header(), "RateLimit"), sfItems(t, w.Header(), "RateLimit-Policy")
	pk, ok := param[[]byte](t, rl[name], "pk")
	ppk, pok := param[[]byte](t, pol[name], "pk")
	if r, _ := param[int64](t, rl[name], "r"); !ok || !pok || len(pk) != 16 || !bytes.Equal(pk, ppk) || r != 0 {
		t.Fatalf("RateLimit %q, RateLimit-Policy %q: want r=0 and one 16-byte pk in both", w.Header().Values("RateLimit"), w.Header().Values("RateLimit-Policy"))
	}
	if qu, _ := param[string](t, pol[name], "qu"); qu != "concurrent-requests" {
		t.Fatalf("RateLimit-Policy %q: qu %q, want concurrent-requests", w.Header().Values("RateLimit-Policy"), qu)
	}
}

// headerUser is a UserIdentity that reads the user from a header.
type headerUser string

func (h headerUser) UserID(c *gin.Context) (string, error) {
	if v := c.GetHeader(string(h)); v != "" {
		return v, nil
	}
	return "", identity.ErrUnauthenticated
}
