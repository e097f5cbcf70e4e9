// Package problem answers the requests a ginlimit route refuses with 429
// in RFC 9457 problem details (application/problem+json), with the problem
// types of the IETF RateLimit header fields draft
// (draft-ietf-httpapi-ratelimit-headers): give [Respond] to
// ginlimit.Respond.
//
//	r.GET("/api/coupon/claim", limiter.RateLimit(
//		ginlimit.Limit(3), ginlimit.Per(ginlimit.User),
//		ginlimit.Respond(problem.Respond)), claim)
//
// A refused request then gets, with the rate limit headers as before:
//
//	HTTP/1.1 429 Too Many Requests
//	Content-Type: application/problem+json
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Quota Exceeded","status":429,
//	 "detail":"Too many requests, please try again later",
//	 "violated-policies":["coupon:claim"]}
//
// ginlimit's own JSON body, {"code":429,"message":...}, stays the default.
package problem

import (
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// The problem types of the draft that a 429 of ginlimit uses, as
// registered with IANA, and their titles.
const (
	// QuotaExceeded is the type of a request refused because it exceeds
	// one or more of the route's rules.
	QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// AbnormalUsageDetected is the type of a request refused because its
	// identity is banned ([ginlimit.Ban]): the draft's type for a pattern
	// of requests that suggests malicious or unintended behaviour.
	AbnormalUsageDetected = "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"

	// TitleQuotaExceeded and TitleAbnormalUsageDetected are the titles
	// the types are registered with.
	TitleQuotaExceeded         = "Quota Exceeded"
	TitleAbnormalUsageDetected = "Abnormal Usage Detected"

	// ContentType is the media type of the body.
	ContentType = "application/problem+json"
)

// Details is the body [Respond] writes: RFC 9457's members and the
// draft's violated-policies, which names each rule that refused the
// request, as the RateLimit-Policy header names it.
type Details struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// For returns the problem details of decision d, a refusal: its type is
// [AbnormalUsageDetected] for a banned identity and [QuotaExceeded]
// otherwise, its detail the route's message (d.Message), and its
// violated policies the rules that refused the request (every refusing
// rule of d.Rules, or d.Rule).
func For(d ginlimit.Decision) Details {
	p := Details{Type: QuotaExceeded, Title: TitleQuotaExceeded, Status: http.StatusTooManyRequests, Detail: d.Message}
	if d.Banned {
		p.Type, p.Title = AbnormalUsageDetected, TitleAbnormalUsageDetected
	}
	for _, r := range d.Rules {
		// Every rule of a refused request reads !Allowed (the request was
		// refused); the rules that refused it are those with a time to wait.
		if !r.Allowed && r.RetryAfter > 0 {
			p.ViolatedPolicies = append(p.ViolatedPolicies, r.Rule)
		}
	}
	if len(p.ViolatedPolicies) == 0 {
		p.ViolatedPolicies = []string{d.Rule}
	}
	return p
}

// Respond writes decision d's problem details ([For]) as the 429 body,
// with the Content-Type application/problem+json. Give it to
// ginlimit.Respond; the rate limit headers and Retry-After are already
// set when it runs.
func Respond(c *gin.Context, d ginlimit.Decision) {
	body, err := json.Marshal(For(d))
	if err != nil {
		// Only strings and an int: Marshal cannot fail. Writing nothing
		// leaves ginlimit's default body.
		return
	}
	c.Data(http.StatusTooManyRequests, ContentType, body)
}
