package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

// MaxUserIDLen is the longest user_id that POST /api/login accepts, in bytes.
const MaxUserIDLen = 64

// TokenTTL is how long a token issued by POST /api/login stays valid.
const TokenTTL = time.Hour

// maxLoginBody bounds the body read by POST /api/login; a login body is a few
// dozen bytes.
const maxLoginBody = 4 << 10

// handlers holds what the public routes' handlers share (the admin API
// is admin's). It is immutable once made.
type handlers struct {
	secret []byte        // signs the tokens of POST /api/login
	users  *identity.JWT // verifies them again in the claim handlers
	logger *slog.Logger
	// limiter carries every route's limit.
	limiter *ginlimit.Limiter
	// remoteJWKS says whether users also verifies tokens with the keys at
	// Config.JWKSURL; /healthz then reports whether they have arrived.
	remoteJWKS bool
	// writeOrder stands for writing an order (Config.WriteOrder).
	writeOrder func(ctx context.Context)
	// vouchers is the catalog: the only vouchers a claim may name.
	vouchers catalog
}

// response is the JSON body of every answer except login's token and
// healthz: {"code":200,"message":"...","data":{...}}.
type response struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    gin.H  `json:"data,omitempty"`
}

func reply(c *gin.Context, code int, msg string, data gin.H) {
	c.JSON(code, response{Code: code, Message: msg, Data: data})
}

// withRemaining adds the quota left by the route's rate limit decision to
// data, when Redis could tell: a decision taken by the fail-open policy
// during a Redis outage knows no quota.
func withRemaining(c *gin.Context, data gin.H) gin.H {
	if d, ok := ginlimit.DecisionFrom(c); ok && d.Err == nil {
		data["remaining"] = d.Remaining
	}
	return data
}

type loginRequest struct {
	UserID string `json:"user_id"`
}

// errLogin is a login body parseLogin refuses; its text is the 400's
// message.
type errLogin string

func (e errLogin) Error() string { return string(e) }

// parseLogin reads the user id of a POST /api/login body: a JSON object
// whose "user_id" is 1 to MaxUserIDLen bytes. Other fields are ignored (a
// "plan" or a "role" grants nothing; see login).
func parseLogin(body []byte) (string, error) {
	var req loginRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return "", errLogin(`The request body must be a JSON object like {"user_id":"alice"}`)
	}
	switch {
	case req.UserID == "":
		return "", errLogin("user_id is required")
	case len(req.UserID) > MaxUserIDLen:
		return "", errLogin("user_id must be at most " + strconv.Itoa(MaxUserIDLen) + " bytes")
	}
	return req.UserID, nil
}

// loginUserKey is the gin context key under which readLogin stores the
// user id of a login body.
const loginUserKey = "coupon.login.user"

// readLogin reads and checks the body of POST /api/login, before the
// route's limit: a body that is refused (400) costs no Redis call and
// spends none of the address's logins.
func (h *handlers) readLogin(c *gin.Context) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxLoginBody))
	if err != nil {
		abortWith(c, http.StatusBadRequest, "The request body is too large or could not be read")
		return
	}
	userID, err := parseLogin(body)
	if err != nil {
		abortWith(c, http.StatusBadRequest, err.Error())
		return
	}
	c.Set(loginUserKey, userID)
}

// login answers POST /api/login {"user_id":"alice"} with an HS256 token for
// that user, once readLogin has read the body and the route's limit per
// client IP admitted it. It is a demo: there is no password, anyone may be
// anyone, but nobody may be an admin (see [NewToken]).
func (h *handlers) login(c *gin.Context) {
	// No role: an admin token is minted only by whoever holds the secret
	// (the command's "token" subcommand), never by this public route.
	// No plan either: a vip token is minted the same way.
	token, err := NewToken(h.secret, c.GetString(loginUserKey), Grants{}, time.Now())
	if err != nil {
		h.logger.ErrorContext(c.Request.Context(), "coupon: sign token", slog.String("error", err.Error()))
		reply(c, http.StatusInternalServerError, "Internal server error", nil)
		return
	}
	c.JSON(http.StatusOK, gin.H{"token": token})
}

// seckill answers GET /api/coupon/seckill once its Method limit admitted it.
func (h *handlers) seckill(c *gin.Context) {
	reply(c, http.StatusOK, "Seckill request accepted", withRemaining(c, gin.H{}))
}

// claim answers GET /api/coupon/claim once its User limit admitted it.
func (h *handlers) claim(c *gin.Context) {
	// The User limit has verified the token already but does not hand the id
	// on; verifying again costs one HMAC. It can still fail if the token
	// expired in between.
	userID, err := h.users.UserID(c)
	if err != nil {
		c.Header("WWW-Authenticate", h.users.Challenge())
		reply(c, http.StatusUnauthorized, "Authentication required", nil)
		return
	}
	reply(c, http.StatusOK, "Coupon claimed", withRemaining(c, gin.H{"user_id": userID}))
}

// voucherClaim answers GET /api/vouchers/:id/claim once its limit, one per
// user per voucher, admitted it.
func (h *handlers) voucherClaim(c *gin.Context) {
	// As in claim: the limit verified the token but does not hand the id on.
	userID, err := h.users.UserID(c)
	if err != nil {
		c.Header("WWW-Authenticate", h.users.Challenge())
		reply(c, http.StatusUnauthorized, "Authentication required", nil)
		return
	}
	v := h.vouchers[c.Param("id")] // found by requireVoucher
	reply(c, http.StatusOK, "Voucher claimed", withRemaining(c, gin.H{"user_id": userID, "voucher_id": v.ID}))
}

// merchant answers GET /api/coupon/merchant once its IP limit admitted it.
func (h *handlers) merchant(c *gin.Context) {
	reply(c, http.StatusOK, "Merchant list", withRemaining(c, gin.H{
		"merchants": []string{"Coffee Corner", "Noodle House", "Book Nook"},
	}))
}

// voucherSeckill answers GET /voucher-order/seckill/:id once its Method
// limit, shared by every id, admitted it.
func (h *handlers) voucherSeckill(c *gin.Context) {
	id, err := strconv.ParseUint(c.Param("id"), 10, 63)
	if err != nil || id == 0 {
		reply(c, http.StatusBadRequest, "The voucher id must be a positive integer", nil)
		return
	}
	reply(c, http.StatusOK, "Voucher order accepted", withRemaining(c, gin.H{"voucher_id": id}))
}

// seckillOrder answers GET /api/coupon/seckill/order while it holds one
// of the route's OrderInFlight slots: it writes the order (simulated,
// about OrderWriteTime) and answers.
func (h *handlers) seckillOrder(c *gin.Context) {
	h.writeOrder(c.Request.Context())
	reply(c, http.StatusOK, "Order placed", nil)
}

// sleepOrder is the demo's order writing: OrderWriteTime, or less if the
// request ends first.
func sleepOrder(ctx context.Context) {
	t := time.NewTimer(OrderWriteTime)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// healthz answers GET /healthz, which is never limited: 200
// {"status":"ok"}, with "jwks_loaded" when Config.JWKSURL is set (false
// until the first set has been fetched; the service works meanwhile, its
// own HS256 tokens included, so the status stays "ok").
func (h *handlers) healthz(c *gin.Context) {
	body := gin.H{"status": "ok"}
	if h.remoteJWKS {
		body["jwks_loaded"] = h.users.JWKSLoaded()
	}
	c.JSON(http.StatusOK, body)
}

// notFound answers every path that no route matches.
func notFound(c *gin.Context) {
	reply(c, http.StatusNotFound, "Not found", nil)
}

// recovery answers a request whose handler panicked with 500 and the
// demo's JSON body, and logs the panic and its stack through l, in the
// demo's one log format (gin.Recovery writes its own). A panic with
// http.ErrAbortHandler, which net/http uses to abort a response, is
// passed on.
func recovery(l *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			l.LogAttrs(c.Request.Context(), slog.LevelError, "coupon: handler panicked; answering 500",
				slog.String("route", c.FullPath()), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			if !c.Writer.Written() {
				c.AbortWithStatusJSON(http.StatusInternalServerError, response{Code: http.StatusInternalServerError, Message: "Internal server error"})
				return
			}
			c.Abort()
		}()
		c.Next()
	}
}

// requestLog writes one Info line per request, except for health checks. It
// logs the route template, not the path, so that ids and probes do not
// multiply the distinct lines.
func requestLog(l *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		switch route {
		case "/healthz":
			return
		case "":
			route = "(no route)"
		}
		l.LogAttrs(c.Request.Context(), slog.LevelInfo, "coupon: request",
			slog.String("method", c.Request.Method),
			slog.String("route", route),
			slog.Int("status", c.Writer.Status()),
			slog.Duration("duration", time.Since(start)))
	}
}
