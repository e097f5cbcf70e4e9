package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
)

// whoKey is where guard leaves who Authorize said asks.
const whoKey = "ginlimit/console:who"

// csp allows the console's own stylesheet and nothing else: no script at
// all (the pages need none), no frames, no form posted elsewhere.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// gate decides who may use the console and proves that a form was posted
// from one of its pages: Config.Authorize, the same-origin check, and the
// forms' token, keyed by a secret the instances share in Redis. It is
// safe for concurrent use.
type gate struct {
	authorizer func(c *gin.Context) (who string, ok bool) // Config.Authorize
	rdb        redis.UniversalClient
	log        *slog.Logger
	secret     atomic.Pointer[[]byte] // keys the forms' tokens; nil until Redis first gave it
	keying     sync.Mutex             // held by the one request that asks Redis for it
}

// guard is the first handler of every console route: the security headers,
// then Authorize, then, for anything but GET and HEAD, the same-origin
// check and the form token.
func (g *gate) guard(ctx *gin.Context) {
	h := ctx.Writer.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	who, ok := g.authorize(ctx)
	if !ok {
		ctx.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "unauthorized"})
		return
	}
	ctx.Set(whoKey, who)
	if ctx.Request.Method == http.MethodGet || ctx.Request.Method == http.MethodHead {
		return
	}
	if !sameOrigin(ctx.Request) {
		ctx.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "cross-site request refused"})
		return
	}
	// A cookie may carry the session: then the request must prove it
	// comes from a console page. A request without cookies carries its
	// credentials itself (a bearer token), which no other site can send.
	if len(ctx.Request.Cookies()) == 0 {
		return
	}
	tok := g.token(who)
	switch {
	case tok == "":
		ctx.AbortWithStatusJSON(http.StatusServiceUnavailable, gin.H{"error": "Redis could not answer; try again"})
	case !hmac.Equal([]byte(ctx.Request.Header.Get("X-Console-Token")), []byte(tok)) &&
		!hmac.Equal([]byte(ctx.PostForm("token")), []byte(tok)):
		ctx.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "missing or wrong form token"})
	}
}

// authorize runs Config.Authorize, refusing when it panics.
func (g *gate) authorize(ctx *gin.Context) (who string, ok bool) {
	defer func() {
		if recover() != nil {
			who, ok = "", false
		}
	}()
	return g.authorizer(ctx)
}

// token is the form token of who: the same on every instance (the key is
// the fleet's) and for every form, and no other site can read it; "" while
// there is no form key (see formKey).
func (g *gate) token(who string) string {
	key := g.formKey()
	if key == nil {
		return ""
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("form\x00" + who))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// sameOrigin reports whether r comes from a page of this host, by the
// standard library's check: Sec-Fetch-Site when the browser sends it,
// else Origin against Host; a request with neither is not a browser's
// form. Sec-Fetch-Site comes first because a page whose Referrer-Policy is
// no-referrer, as the console's are, posts its forms with "Origin: null".
func sameOrigin(r *http.Request) bool {
	return (&http.CrossOriginProtection{}).Check(r) == nil
}

// whoOf returns who guard found asks.
func whoOf(ctx *gin.Context) string { return ctx.GetString(whoKey) }

// secretKey holds the random key of the forms' tokens, shared by the
// instances so that a form one of them rendered posts to any other.
const secretKey = "{ginlimit:console}:secret"

// formKey returns the fleet's form key, read from Redis (or made there)
// on first use rather than by Mount, so that an application mounts its
// console and starts while Redis is down; nil until Redis has answered.
// One request asks at a time, for at most a second; the others meanwhile
// get nil rather than wait in line.
func (g *gate) formKey() []byte {
	if k := g.secret.Load(); k != nil {
		return *k
	}
	if !g.keying.TryLock() {
		return nil
	}
	defer g.keying.Unlock()
	if k := g.secret.Load(); k != nil {
		return *k
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	k, err := sharedSecret(ctx, g.rdb)
	if err != nil {
		g.log.LogAttrs(ctx, slog.LevelWarn, "ginlimit/console: no form key yet; posts from a signed-in browser are refused until Redis answers", errAttr(err))
		return nil
	}
	g.secret.Store(&k)
	return k
}

// sharedSecret returns the fleet's form key, making it if there is none.
func sharedSecret(ctx context.Context, rdb redis.UniversalClient) ([]byte, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	old, err := rdb.SetArgs(ctx, secretKey, b, redis.SetArgs{Mode: "NX", Get: true}).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return b, nil // ours is the key
	case err != nil:
		return nil, fmt.Errorf("form key: %w", err)
	}
	return old, nil
}
