package app

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
	"github.com/ginlimit/ginlimit/identity"
)

// The rate limit of POST /api/login: LoginLimit logins per LoginWindow for
// each client IP ([ginlimit.IP]). Anyone may log in as anyone here (it is a
// demo), and each token is a user whose claims leave keys in Redis for up
// to a day (a voucher claim's); so one address mints at most LoginLimit
// users per LoginWindow, and the keys they can leave are bounded by that,
// times the catalog and the claim rule's plans. A refused login costs one
// Redis call and makes no key but the address's count. A body that is not a valid login
// is refused (400) before the limit, and spends none of it.
const (
	// LoginKey is the Redis key prefix of POST /api/login.
	LoginKey = "coupon:login:"
	// LoginLimit is how many logins POST /api/login admits per client IP
	// per LoginWindow.
	LoginLimit = 10
	// LoginWindow is the sliding window of POST /api/login.
	LoginWindow = time.Hour
	// LoginMessage is the 429 message of POST /api/login.
	LoginMessage = "Too many logins from this address, please try again later"
)

// The rate limits of GET /api/coupon/seckill: 100 requests per 10 seconds,
// counted over all clients together ([ginlimit.Method]).
const (
	// SeckillKey is the Redis key prefix of GET /api/coupon/seckill.
	SeckillKey = "coupon:seckill:"
	// SeckillLimit is how many requests GET /api/coupon/seckill admits per
	// SeckillWindow.
	SeckillLimit = 100
	// SeckillWindow is the sliding window of GET /api/coupon/seckill.
	SeckillWindow = 10 * time.Second
	// SeckillMessage is the 429 message of GET /api/coupon/seckill and of
	// GET /voucher-order/seckill/:id.
	SeckillMessage = "Seckill is too popular, please try again later"
)

// The in-flight limit of GET /api/coupon/seckill/order: at most
// OrderInFlight orders are being written at once, over every instance
// ([ginlimit.InFlight], counted over all clients together). A request that
// finds no slot free gets 429 with OrderMessage.
const (
	// OrderKey is the Redis key prefix of GET /api/coupon/seckill/order.
	OrderKey = "coupon:order:"
	// OrderInFlight is how many requests of GET /api/coupon/seckill/order
	// are served at once, over every instance.
	OrderInFlight = 10
	// OrderLease is how long a slot of an instance that died stays taken.
	// A request that runs longer keeps its slot: its lease is renewed.
	OrderLease = 30 * time.Second
	// OrderWriteTime is how long the demo takes to write an order.
	OrderWriteTime = 300 * time.Millisecond
	// OrderMessage is the 429 message of GET /api/coupon/seckill/order.
	OrderMessage = "Too many orders are being placed, please try again later"
)

// The rate limits of GET /api/coupon/claim: 3 requests per 60 seconds for
// each user of a valid bearer token ([ginlimit.User]), or 10 per 60 seconds
// for a user whose token's "plan" claim is "vip" ([ginlimit.LimitBy]). The
// rule's options, claimOptions, are given both to the route and to the
// [ginlimit.Policy] the admin API under /api/admin/limits/claim uses, so
// both address the same counts.
const (
	// ClaimPath is the path of the claim route.
	ClaimPath = "/api/coupon/claim"
	// ClaimRoute names the claim route as ginlimit does, method and route
	// template: the Route of the [ginlimit.Target] the admin API inspects
	// and resets.
	ClaimRoute = http.MethodGet + " " + ClaimPath
	// ClaimKey is the Redis key prefix of GET /api/coupon/claim.
	ClaimKey = "coupon:claim:"
	// ClaimLimit is how many requests GET /api/coupon/claim admits per user
	// per ClaimWindow.
	ClaimLimit = 3
	// ClaimWindow is the sliding window of GET /api/coupon/claim.
	ClaimWindow = 60 * time.Second
	// ClaimMessage is the 429 message of GET /api/coupon/claim.
	ClaimMessage = "You are claiming coupons too often, please try again later"
	// PlanClaim is the name of the token claim that carries the user's
	// plan. A token without it, or with a plan the claim rule does not
	// know, gets ClaimLimit.
	PlanClaim = "plan"
	// PlanVIP is the plan whose users may claim ClaimVIPLimit coupons per
	// ClaimWindow. POST /api/login never grants it (see [NewToken]).
	PlanVIP = "vip"
	// ClaimVIPLimit is how many requests GET /api/coupon/claim admits per
	// ClaimWindow to a user whose token's plan is PlanVIP.
	ClaimVIPLimit = 10
)

// The rate limit of GET /api/vouchers/:id/claim: 1 claim per 24 hours for
// each user of a valid bearer token and each voucher id
// ([ginlimit.Per]([ginlimit.ByUser](), [ginlimit.ByParam]("id"))): alice's
// claims of voucher 7 and of voucher 8 are counted apart, and apart from
// bob's. The id is looked up in the catalog ([Vouchers]) before the limit
// counts it, 404 when it is not there, so only the catalog's ids are ever
// counted: a made-up id creates no key, and "07" cannot claim voucher 7 a
// second time.
const (
	// VoucherClaimPath is the route template of the voucher claim route.
	VoucherClaimPath = "/api/vouchers/:id/claim"
	// VoucherClaimKey is the Redis key prefix of GET /api/vouchers/:id/claim.
	VoucherClaimKey = "voucher:claim:"
	// VoucherClaimLimit is how many claims GET /api/vouchers/:id/claim
	// admits per user per voucher per VoucherClaimWindow.
	VoucherClaimLimit = 1
	// VoucherClaimWindow is the sliding window of
	// GET /api/vouchers/:id/claim.
	VoucherClaimWindow = 24 * time.Hour
	// VoucherClaimMessage is the 429 message of GET /api/vouchers/:id/claim.
	VoucherClaimMessage = "You have already claimed this voucher in the last 24 hours"
)

// The rate limits of GET /api/coupon/merchant: 5 requests per second for
// each client IP ([ginlimit.IP]), and a ban ([ginlimit.Ban]): an IP that
// collects MerchantBanAfter refusals within MerchantBanWithin is refused for
// MerchantBanFor, with MerchantBanMessage.
const (
	// MerchantKey is the Redis key prefix of GET /api/coupon/merchant.
	MerchantKey = "coupon:merchant:"
	// MerchantLimit is how many requests GET /api/coupon/merchant admits per
	// client IP per MerchantWindow.
	MerchantLimit = 5
	// MerchantWindow is the sliding window of GET /api/coupon/merchant.
	MerchantWindow = time.Second
	// MerchantMessage is the 429 message of GET /api/coupon/merchant.
	MerchantMessage = "Too many merchant queries, please try again later"
	// MerchantBanAfter is how many refusals within MerchantBanWithin ban
	// an IP from GET /api/coupon/merchant.
	MerchantBanAfter = 20
	// MerchantBanWithin is the period MerchantBanAfter refusals are counted
	// over.
	MerchantBanWithin = 10 * time.Second
	// MerchantBanFor is how long a ban from GET /api/coupon/merchant lasts.
	MerchantBanFor = 60 * time.Second
	// MerchantBanMessage is the 429 message of a banned IP.
	MerchantBanMessage = "You are temporarily banned from merchant queries for sending too many requests, please try again later"
)

// The rate limits of GET /voucher-order/seckill/:id: 5 requests per 10
// seconds over all clients and all ids together ([ginlimit.Method] counts
// per route template, not per path). The 429 message is [SeckillMessage].
const (
	// VoucherSeckillKey is the Redis key prefix of
	// GET /voucher-order/seckill/:id.
	VoucherSeckillKey = "voucher:seckill:"
	// VoucherSeckillLimit is how many requests GET /voucher-order/seckill/:id
	// admits per VoucherSeckillWindow.
	VoucherSeckillLimit = 5
	// VoucherSeckillWindow is the sliding window of
	// GET /voucher-order/seckill/:id.
	VoucherSeckillWindow = 10 * time.Second
)

// The rate limit of each admin route, GET and DELETE
// /api/admin/limits/claim/users/:user: 60 requests per 60 seconds for each
// admin ([ginlimit.User], the admin's own user id), counted per route. It
// applies only to requests that passed the admin check and carry a valid
// user id, so a refused request touches no key.
const (
	// AdminKey is the Redis key prefix of the admin routes.
	AdminKey = "coupon:admin:"
	// AdminLimit is how many requests each admin route admits per admin per
	// AdminWindow.
	AdminLimit = 60
	// AdminWindow is the sliding window of the admin routes.
	AdminWindow = 60 * time.Second
	// AdminMessage is the 429 message of the admin routes.
	AdminMessage = "Too many admin requests, please slow down"
)

// adminClaimUserPath is the path of the admin API's claim-limit resource
// for one user.
const adminClaimUserPath = "/api/admin/limits/claim/users/:user"

// claimPlans are the plans of the claim rule besides its own limit, by the
// value of the token's PlanClaim, each with its limit per ClaimWindow. It is
// a function, not a package-level map, so that nothing can change the
// rule's plans after start-up.
func claimPlans() map[string]int { return map[string]int{PlanVIP: ClaimVIPLimit} }

// claimOptions are the claim rule, its only definition: the claim route
// carries it and the admin API Peeks and Resets its Policy. Its limit is
// ClaimLimit, or the plan's limit (claimPlans) for a token whose PlanClaim
// names one, read from the token users verified; each plan has its own
// counts.
func claimOptions(users *identity.JWT) []ginlimit.Option {
	return []ginlimit.Option{
		ginlimit.Key(ClaimKey), ginlimit.Window(ClaimWindow), ginlimit.Limit(ClaimLimit),
		ginlimit.Message(ClaimMessage),
		ginlimit.Type(ginlimit.User),
		ginlimit.LimitBy(func(c *gin.Context) string {
			plan, _ := users.Claim(c, PlanClaim) // a token that does not verify: 401 from the rule
			return plan
		}, claimPlans()),
	}
}

// respondBanned writes the merchant route's own message to a banned IP;
// for any other refusal it writes nothing, and ginlimit writes the rule's.
func respondBanned(c *gin.Context, d ginlimit.Decision) {
	if d.Banned {
		c.JSON(http.StatusTooManyRequests, gin.H{"code": http.StatusTooManyRequests, "message": MerchantBanMessage})
	}
}

// routes registers every route of the demo on r. Each limited route carries
// its rule as a limiter.RateLimit annotation, the Gin form of Java's
// @RateLimiter(key, window, limit, message, type); the Redis backend and the
// identity resolvers are the limiter's. The claim route's options are also
// adm.claimPolicy's, so that the admin API can inspect and reset its counts.
func routes(r gin.IRoutes, h *handlers, adm *admin) {
	limiter := h.limiter
	r.POST("/api/login", h.readLogin, limiter.RateLimit(
		ginlimit.Key(LoginKey), ginlimit.Window(LoginWindow), ginlimit.Limit(LoginLimit),
		ginlimit.Message(LoginMessage),
		ginlimit.Type(ginlimit.IP)), h.login)

	r.GET("/api/coupon/seckill", limiter.RateLimit(
		ginlimit.Key(SeckillKey), ginlimit.Window(SeckillWindow), ginlimit.Limit(SeckillLimit),
		ginlimit.Message(SeckillMessage),
		ginlimit.Type(ginlimit.Method)), h.seckill)

	r.GET("/api/coupon/seckill/order", limiter.RateLimit(
		ginlimit.Key(OrderKey), ginlimit.InFlight(OrderInFlight, OrderLease),
		ginlimit.Message(OrderMessage)), h.seckillOrder)

	r.GET(ClaimPath, limiter.RateLimit(claimOptions(h.users)...), h.claim)

	r.GET("/api/vouchers", h.listVouchers)

	// The id is looked up before the limit, so that only a voucher of the
	// catalog is ever counted (see VoucherClaimPath).
	r.GET(VoucherClaimPath, h.requireVoucher, limiter.RateLimit(
		ginlimit.Key(VoucherClaimKey), ginlimit.Window(VoucherClaimWindow), ginlimit.Limit(VoucherClaimLimit),
		ginlimit.Message(VoucherClaimMessage),
		ginlimit.Per(ginlimit.User, ginlimit.ByParam("id"))), h.voucherClaim)

	r.GET("/api/coupon/merchant", limiter.RateLimit(
		ginlimit.Key(MerchantKey), ginlimit.Window(MerchantWindow), ginlimit.Limit(MerchantLimit),
		ginlimit.Message(MerchantMessage),
		ginlimit.Type(ginlimit.IP),
		ginlimit.Ban(MerchantBanAfter, MerchantBanWithin, MerchantBanFor), ginlimit.Respond(respondBanned)), h.merchant)

	r.GET("/voucher-order/seckill/:id", limiter.RateLimit(
		ginlimit.Key(VoucherSeckillKey), ginlimit.Window(VoucherSeckillWindow), ginlimit.Limit(VoucherSeckillLimit),
		ginlimit.Message(SeckillMessage),
		ginlimit.Type(ginlimit.Method)), h.voucherSeckill)

	// The admin API: who may call it is checked first, then the user id,
	// and only then the admin's own limit, so that a refused request
	// touches no key. The claim rule it manages does not apply here.
	adminLimit := limiter.RateLimit(
		ginlimit.Key(AdminKey), ginlimit.Window(AdminWindow), ginlimit.Limit(AdminLimit),
		ginlimit.Message(AdminMessage),
		ginlimit.Type(ginlimit.User))
	r.GET(adminClaimUserPath, adm.requireAdmin, adm.requireUserParam, adm.requirePlanQuery, adminLimit, adm.peekClaim)
	r.DELETE(adminClaimUserPath, adm.requireAdmin, adm.requireUserParam, adminLimit, adm.resetClaim)
	r.GET(adminClaimLimitsPath, adm.requireAdmin, adm.requireSettingsQuery, adminLimit, adm.claimSettings)
	r.PUT(adminClaimLimitsPath, adm.requireAdmin, adminLimit, adm.setClaimLimit)

	// The console's one page without a token; the console itself is
	// mounted by newEngine.
	r.GET(ConsoleSignInPath, func(c *gin.Context) { signInForm(c, http.StatusOK, false) })
	r.POST(ConsoleSignInPath, adm.signIn)

	r.GET("/healthz", h.healthz)
}
