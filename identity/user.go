package identity

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/gin-gonic/gin"
)

// ErrUnauthenticated is wrapped by every error a [User] returns when a request
// has no valid user identity. Such a request is answered with 401 and is never
// counted.
var ErrUnauthenticated = errors.New("identity: unauthenticated")

// MaxUserIDLen is the longest user id accepted, in bytes. Longer ids are
// rejected as unauthenticated so that no caller can grow Redis keys without
// bound.
const MaxUserIDLen = 256

// User resolves the id of the authenticated user of a request.
//
// Implementations must be safe for concurrent use and must return an error
// wrapping [ErrUnauthenticated], never an empty id, when there is no valid
// user.
type User interface {
	UserID(c *gin.Context) (string, error)
}

// FromContext returns a User that reads the id the application's own
// authentication middleware stored with c.Set(key, id). The value may be a
// string, a fmt.Stringer or any Go integer type, named types included;
// anything else, a missing or nil value or an empty id is unauthenticated.
func FromContext(key string) User {
	return contextUser{key: key}
}

type contextUser struct{ key string }

var _ User = contextUser{}

// UserID returns the id stored under the key; see FromContext.
func (u contextUser) UserID(c *gin.Context) (string, error) {
	v, ok := c.Get(u.key)
	if !ok {
		return "", fail(ReasonMissing, fmt.Errorf("%w: no value under context key %q", ErrUnauthenticated, u.key))
	}
	id, err := idString(v)
	if err != nil {
		return "", fail(ReasonMalformed, fmt.Errorf("%w: context key %q: %w", ErrUnauthenticated, u.key, err))
	}
	if _, err := checkID(id); err != nil {
		return "", fail(ReasonMalformed, err)
	}
	return id, nil
}

// idString converts a context value to an id: strings, integers and
// fmt.Stringers, including named types of those kinds.
func idString(v any) (id string, err error) {
	if s, ok := v.(fmt.Stringer); ok {
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", errors.New("nil value")
		}
		defer func() {
			if r := recover(); r != nil {
				id, err = "", fmt.Errorf("the String method of %T panicked", v)
			}
		}()
		return s.String(), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(rv.Uint(), 10), nil
	}
	return "", fmt.Errorf("holds a %T, not a string, integer or fmt.Stringer", v)
}

func checkID(id string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("%w: empty user id", ErrUnauthenticated)
	}
	if len(id) > MaxUserIDLen {
		return "", fmt.Errorf("%w: user id longer than %d bytes", ErrUnauthenticated, MaxUserIDLen)
	}
	return id, nil
}
