package identity_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/identity"
)

// stringerID is a fmt.Stringer such as a UUID type.
type stringerID struct{ v string }

func (s stringerID) String() string { return s.v }

// ptrStringerID implements fmt.Stringer on its pointer only.
type ptrStringerID struct{ v string }

func (s *ptrStringerID) String() string { return s.v }

// Named types, as applications commonly declare for their ids.
type (
	namedIntID    int64
	namedUintID   uint
	namedStringID string
)

// ginContext returns a fresh gin context with a request and, unless
// values is nil, the given context values set.
func ginContext(values map[string]any) *gin.Context {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest(http.MethodGet, "/", nil)
	for k, v := range values {
		c.Set(k, v)
	}
	return c
}

// contextCase is a value the application's middleware sets, and the id
// FromContext reads from it ("" when it must refuse it).
type contextCase struct {
	name  string
	value any
	want  string
}

// fromContextAcceptCases are values FromContext accepts: strings within
// the bound, every integer type, fmt.Stringers.
func fromContextAcceptCases() []contextCase {
	return []contextCase{
		{"string", "alice", "alice"},
		{"string with spaces kept", " alice ", " alice "},
		{"string at MaxUserIDLen", strings.Repeat("a", identity.MaxUserIDLen), strings.Repeat("a", identity.MaxUserIDLen)},
		{"multi-byte string within MaxUserIDLen bytes", strings.Repeat("é", identity.MaxUserIDLen/2), strings.Repeat("é", identity.MaxUserIDLen/2)},
		{"int", 42, "42"},
		{"negative int", -7, "-7"},
		{"zero int", 0, "0"},
		{"int8", int8(-128), "-128"},
		{"int16", int16(32767), "32767"},
		{"int32", int32(-2147483648), "-2147483648"},
		{"int64", int64(-9223372036854775808), "-9223372036854775808"},
		{"uint", uint(7), "7"},
		{"uint max", ^uint(0), strconv.FormatUint(uint64(^uint(0)), 10)},
		{"uint8", uint8(255), "255"},
		{"uint16", uint16(65535), "65535"},
		{"uint32", uint32(4294967295), "4294967295"},
		{"uint64", uint64(18446744073709551615), "18446744073709551615"},
		{"fmt.Stringer value", stringerID{"user-9"}, "user-9"},
		{"fmt.Stringer pointer", &ptrStringerID{"user-10"}, "user-10"},
	}
}

func TestFromContextAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range fromContextAcceptCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := identity.FromContext("uid")
			got, err := u.UserID(ginContext(map[string]any{"uid": tc.value, "other": "mallory"}))
			if err != nil {
				t.Fatalf("UserID with %T(%v): unexpected error %v", tc.value, tc.value, err)
			}
			if got != tc.want {
				t.Fatalf("UserID with %T(%v) = %q, want %q", tc.value, tc.value, got, tc.want)
			}
		})
	}
}

// contextRejectCase is the values set on a request's context, and the key
// FromContext reads, which must give no user.
type contextRejectCase struct {
	name   string
	key    string         // key FromContext reads
	values map[string]any // values set on the context
}

// fromContextRejectCases: a missing key, values of other types, ids that
// are empty or over the bound.
func fromContextRejectCases() []contextRejectCase {
	return []contextRejectCase{
		{"missing key", "uid", map[string]any{"other": "alice"}},
		{"no values at all", "uid", nil},
		{"key differs in case", "uid", map[string]any{"UID": "alice"}},
		{"empty string", "uid", map[string]any{"uid": ""}},
		{"nil value", "uid", map[string]any{"uid": nil}},
		{"struct", "uid", map[string]any{"uid": struct{ ID string }{"alice"}}},
		{"byte slice", "uid", map[string]any{"uid": []byte("alice")}},
		{"string pointer", "uid", map[string]any{"uid": new("alice")}},
		{"float64", "uid", map[string]any{"uid": 42.0}},
		{"bool", "uid", map[string]any{"uid": true}},
		{"map", "uid", map[string]any{"uid": map[string]string{"id": "alice"}}},
		{"string over MaxUserIDLen", "uid", map[string]any{"uid": strings.Repeat("a", identity.MaxUserIDLen+1)}},
		{"multi-byte string over MaxUserIDLen bytes", "uid", map[string]any{"uid": strings.Repeat("é", identity.MaxUserIDLen/2+1)}},
		{"Stringer returning empty", "uid", map[string]any{"uid": stringerID{""}}},
		{"Stringer over MaxUserIDLen", "uid", map[string]any{"uid": stringerID{strings.Repeat("a", identity.MaxUserIDLen+1)}}},
		{"empty key, nothing set", "", map[string]any{"uid": "alice"}},
	}
}

func TestFromContextRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range fromContextRejectCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := identity.FromContext(tc.key).UserID(ginContext(tc.values))
			if !errors.Is(err, identity.ErrUnauthenticated) {
				t.Fatalf("UserID = %q, %v; want an error wrapping ErrUnauthenticated", got, err)
			}
			if got != "" {
				t.Fatalf("UserID returned id %q together with error %v", got, err)
			}
		})
	}
}

// TestFromContextKeyIsolation checks that each User reads only its own key.
func TestFromContextKeyIsolation(t *testing.T) {
	t.Parallel()
	c := ginContext(map[string]any{"a": "alice", "b": 7})
	tests := []struct {
		key  string
		want string
	}{
		{"a", "alice"},
		{"b", "7"},
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			got, err := identity.FromContext(tc.key).UserID(c)
			if err != nil || got != tc.want {
				t.Fatalf("FromContext(%q).UserID = %q, %v; want %q, nil", tc.key, got, err, tc.want)
			}
		})
	}
}

// TestFromContextNamedTypes covers ids of a defined type. The doc comment of
// FromContext promises "a string, a fmt.Stringer or any Go integer type", and
// `type UserID int64` is an integer type, but UserID switches on the exact
// predeclared types only, so such ids are rejected as unauthenticated.
func TestFromContextNamedTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value any
		want  string
	}{
		{"defined int64", namedIntID(42), "42"},
		{"defined uint", namedUintID(7), "7"},
		{"defined string", namedStringID("alice"), "alice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := identity.FromContext("uid").UserID(ginContext(map[string]any{"uid": tc.value}))
			if err != nil || got != tc.want {
				t.Fatalf("UserID with %T(%v) = %q, %v; want %q, nil", tc.value, tc.value, got, err, tc.want)
			}
		})
	}
}

// TestFromContextNilStringer covers a typed nil pointer whose String method
// dereferences its receiver, as an auth middleware that stores a *T without
// checking it would produce. UserID calls String on it and panics instead of
// reporting a missing user.
func TestFromContextNilStringer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value any
	}{
		{"nil *ptrStringerID", (*ptrStringerID)(nil)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				got string
				err error
			)
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("UserID with %T(nil) panicked: %v", tc.value, p)
					}
				}()
				got, err = identity.FromContext("uid").UserID(ginContext(map[string]any{"uid": tc.value}))
			}()
			if !errors.Is(err, identity.ErrUnauthenticated) || got != "" {
				t.Fatalf("UserID = %q, %v; want an error wrapping ErrUnauthenticated", got, err)
			}
		})
	}
}
