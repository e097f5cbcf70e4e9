package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/gin-gonic/gin"
)

// whoKey is where guard leaves who Authorize said asks.
const whoKey = "ginlimit/console:who"

// csp allows the console's own stylesheet and nothing else: no script at
// all (the pages need none), no frames, no form posted elsewhere.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// guard is the first handler of every console route: the security headers,
// then Authorize, then, for anything but GET and HEAD, the same-origin
// check and the form token.
func (c *Console) guard(ctx *gin.Context) {
	h := ctx.Writer.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	who, ok := c.authorize(ctx)
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
	tok := c.token(who)
	switch {
	case tok == "":
		ctx.AbortWithStatusJSON(http.StatusServiceUnavailable, gin.H{"error": "Redis could not answer; try again"})
	case !hmac.Equal([]byte(ctx.Request.Header.Get("X-Console-Token")), []byte(tok)) &&
		!hmac.Equal([]byte(ctx.PostForm("token")), []byte(tok)):
		ctx.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "missing or wrong form token"})
	}
}

// authorize runs Config.Authorize, refusing when it panics.
func (c *Console) authorize(ctx *gin.Context) (who string, ok bool) {
	defer func() {
		if recover() != nil {
			who, ok = "", false
		}
	}()
	return c.cfg.Authorize(ctx)
}

// token is the form token of who: the same on every instance (the key is
// the fleet's) and for every form, and no other site can read it; "" while
// there is no form key (see formKey).
func (c *Console) token(who string) string {
	key := c.formKey()
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
