package app

import (
	"crypto/rand"
	"encoding/base64"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// The operator's console is mounted at ConsolePath behind the admin token:
// every request to it needs a token whose "role" claim is [AdminRole],
// sent as "Authorization: Bearer" or, for a browser, kept by the sign-in
// page at ConsoleSignInPath in a cookie.
const (
	// ConsolePath is where the demo mounts the console.
	ConsolePath = "/console/"
	// ConsoleSignInPath is the sign-in page: the one page of the console
	// served without a token. Its form takes an admin token and keeps it
	// in the ConsoleCookie for the browser.
	ConsoleSignInPath = "/console/sign-in"
	// ConsoleCookie is the cookie the sign-in page sets: the admin token
	// itself, HttpOnly, SameSite=Strict and limited to the console's path.
	// It is a session cookie; the token's own expiry (TokenTTL for a token
	// of the "token" subcommand) ends it sooner.
	ConsoleCookie = "coupon_console"
)

// maxSignInBody bounds the body of the sign-in form: a token and its name.
const maxSignInBody = 16 << 10

// consoleAdmin is the console's authorization: the admin of the request's
// token, as requireAdmin finds it, taken from the Authorization header or,
// when there is none, from the ConsoleCookie.
func (adm *admin) consoleAdmin(c *gin.Context) (string, bool) {
	if c.Request.Header.Get("Authorization") != "" {
		admin, status := adm.adminOf(c)
		return admin, status == http.StatusOK
	}
	ck, err := c.Request.Cookie(ConsoleCookie)
	if err != nil || ck.Value == "" {
		return "", false
	}
	return adm.adminOfToken(c.Request, ck.Value)
}

// adminOfToken is the admin of token, as if r had carried it as its bearer
// token.
func (adm *admin) adminOfToken(r *http.Request, token string) (string, bool) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	admin, status := adm.adminOf(&gin.Context{Request: r}) // only the request is read
	return admin, status == http.StatusOK
}

// signInPage is the sign-in form. It loads nothing: its one style sheet is
// inline, allowed by the nonce of the response's Content-Security-Policy.
var signInPage = template.Must(template.New("sign-in").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in: coupon console</title>
<style nonce="{{.Nonce}}">body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em;color:#1b1f24}
textarea{width:100%;font:13px ui-monospace,monospace}button{font:inherit;padding:.3em 1.2em;margin-top:.5em}
.error{color:#a40e26}code{background:#eef1f4;padding:0 .2em}</style></head>
<body><h1>Sign in to the console</h1>
{{if .Failed}}<p class="error" role="alert" data-field="error">That is not an admin token, or it has expired.</p>{{end}}
<form method="post" action="{{.Action}}" data-form="sign-in">
<label for="token">Admin token</label>
<textarea id="token" name="token" rows="6" autocomplete="off" spellcheck="false" required></textarea>
<button type="submit">Sign in</button>
</form>
<p>Mint one with <code>go run ./example/coupon token -role admin YOUR_NAME</code>. Scripts may instead send it on every request as <code>Authorization: Bearer</code>.</p>
</body></html>
`))

// signInForm serves the sign-in page, with failed saying whether the last
// attempt was refused.
func signInForm(c *gin.Context, status int, failed bool) {
	var raw [16]byte
	_, _ = rand.Read(raw[:]) // never fails (crypto/rand)
	nonce := base64.RawStdEncoding.EncodeToString(raw[:])
	hd := c.Writer.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+nonce+"'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Type", "text/html; charset=utf-8")
	c.Status(status)
	_ = signInPage.Execute(c.Writer, struct {
		Nonce, Action string
		Failed        bool
	}{nonce, ConsoleSignInPath, failed})
}

// signIn answers the sign-in form's POST: an admin token becomes the
// ConsoleCookie and the browser goes on to the console (303); anything else
// gets the form again (401), with no cookie. A post from another origin
// is refused (403) before its body is read, so that no other site can
// sign a browser in under a token of its choosing.
func (adm *admin) signIn(c *gin.Context) {
	// The standard library's check: Sec-Fetch-Site, or else Origin
	// against Host; a request with neither is no browser's.
	if (&http.CrossOriginProtection{}).Check(c.Request) != nil {
		abortWith(c, http.StatusForbidden, "Cross-origin sign-in refused")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxSignInBody))
	token, ok := "", err == nil
	if ok {
		token, ok = parseSignIn(string(body))
	}
	if ok {
		var admin string
		if admin, ok = adm.adminOfToken(c.Request, token); ok {
			adm.logger.LogAttrs(c.Request.Context(), slog.LevelInfo, "coupon: console sign-in", slog.String("admin", admin))
		}
	}
	if !ok {
		signInForm(c, http.StatusUnauthorized, true)
		return
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: ConsoleCookie, Value: token, Path: ConsolePath,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.Request.TLS != nil,
	})
	c.Redirect(http.StatusSeeOther, ConsolePath)
}

// parseSignIn reads the sign-in form's body, application/x-www-form-urlencoded:
// exactly one field, "token", once, whose value is a plausible token (1 to
// maxSignInBody bytes of the URL-safe base64 alphabet and dots, as a JWT is),
// so that nothing but a token ever reaches a header or a cookie.
func parseSignIn(body string) (string, bool) {
	q, err := url.ParseQuery(body)
	if err != nil || len(q) != 1 || len(q["token"]) != 1 {
		return "", false
	}
	tok := strings.TrimSpace(q["token"][0]) // a pasted token may end in a new line
	if tok == "" {
		return "", false
	}
	for i := 0; i < len(tok); i++ {
		switch b := tok[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_', b == '.':
		default:
			return "", false
		}
	}
	return tok, true
}
