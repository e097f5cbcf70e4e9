package identity

import (
	"errors"
	"fmt"
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
// string, a fmt.Stringer or any Go integer type; anything else, a missing
// value or an empty id is unauthenticated.
func FromContext(key string) User {
	return contextUser{key: key}
}

type contextUser struct{ key string }

var _ User = contextUser{}

func (u contextUser) UserID(c *gin.Context) (string, error) {
	v, ok := c.Get(u.key)
	if !ok {
		return "", fmt.Errorf("%w: no value under context key %q", ErrUnauthenticated, u.key)
	}
	var id string
	switch v := v.(type) {
	case string:
		id = v
	case fmt.Stringer:
		id = v.String()
	case int:
		id = strconv.FormatInt(int64(v), 10)
	case int8:
		id = strconv.FormatInt(int64(v), 10)
	case int16:
		id = strconv.FormatInt(int64(v), 10)
	case int32:
		id = strconv.FormatInt(int64(v), 10)
	case int64:
		id = strconv.FormatInt(v, 10)
	case uint:
		id = strconv.FormatUint(uint64(v), 10)
	case uint8:
		id = strconv.FormatUint(uint64(v), 10)
	case uint16:
		id = strconv.FormatUint(uint64(v), 10)
	case uint32:
		id = strconv.FormatUint(uint64(v), 10)
	case uint64:
		id = strconv.FormatUint(v, 10)
	default:
		return "", fmt.Errorf("%w: context key %q holds a %T, not a string or integer", ErrUnauthenticated, u.key, v)
	}
	return checkID(id)
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
