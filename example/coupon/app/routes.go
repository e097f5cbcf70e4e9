package app

import (
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
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

// The rate limits of GET /api/coupon/claim: 3 requests per 60 seconds for
// each user of a valid bearer token ([ginlimit.User]).
const (
	// ClaimKey is the Redis key prefix of GET /api/coupon/claim.
	ClaimKey = "coupon:claim:"
	// ClaimLimit is how many requests GET /api/coupon/claim admits per user
	// per ClaimWindow.
	ClaimLimit = 3
	// ClaimWindow is the sliding window of GET /api/coupon/claim.
	ClaimWindow = 60 * time.Second
	// ClaimMessage is the 429 message of GET /api/coupon/claim.
	ClaimMessage = "You are claiming coupons too often, please try again later"
)

// The rate limits of GET /api/coupon/merchant: 5 requests per second for
// each client IP ([ginlimit.IP]).
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

// routes registers every route of the demo on r. Each limited route carries
// its rule as a ginlimit.RateLimit annotation, the Gin form of Java's
// @RateLimiter(key, window, limit, message, type); the Redis backend and the
// identity resolvers come from the limiter installed on the engine.
func routes(r gin.IRoutes, h *handlers) {
	r.POST("/api/login", h.login)

	r.GET("/api/coupon/seckill", ginlimit.RateLimit(
		ginlimit.Key(SeckillKey), ginlimit.Window(SeckillWindow), ginlimit.Limit(SeckillLimit),
		ginlimit.Message(SeckillMessage),
		ginlimit.Type(ginlimit.Method)), h.seckill)

	r.GET("/api/coupon/claim", ginlimit.RateLimit(
		ginlimit.Key(ClaimKey), ginlimit.Window(ClaimWindow), ginlimit.Limit(ClaimLimit),
		ginlimit.Message(ClaimMessage),
		ginlimit.Type(ginlimit.User)), h.claim)

	r.GET("/api/coupon/merchant", ginlimit.RateLimit(
		ginlimit.Key(MerchantKey), ginlimit.Window(MerchantWindow), ginlimit.Limit(MerchantLimit),
		ginlimit.Message(MerchantMessage),
		ginlimit.Type(ginlimit.IP)), h.merchant)

	r.GET("/voucher-order/seckill/:id", ginlimit.RateLimit(
		ginlimit.Key(VoucherSeckillKey), ginlimit.Window(VoucherSeckillWindow), ginlimit.Limit(VoucherSeckillLimit),
		ginlimit.Message(SeckillMessage),
		ginlimit.Type(ginlimit.Method)), h.voucherSeckill)

	r.GET("/healthz", h.healthz)
}
