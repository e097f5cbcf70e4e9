package ginlimit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"
)

// The rule options of the annotation's own fields and of cost. The
// algorithm's options are in algorithm.go, the dimension's in dimension.go,
// LimitBy in plans.go.

// Key sets the Redis key prefix, the Java annotation's key. The default is
// [DefaultKey]. It must not be empty and must not contain '{' or '}', which
// would move the key's Redis Cluster hash tag.
func Key(prefix string) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		switch {
		case prefix == "":
			return fmt.Errorf("Key(%q): the key prefix must not be empty", prefix)
		case strings.ContainsAny(prefix, "{}"):
			return fmt.Errorf("Key(%q): the key prefix must not contain '{' or '}' (they make the Redis Cluster hash tag)", prefix)
		}
		r.Prefix = prefix
		return nil
	})
}

// Name sets the rule's name: the policy name in the RateLimit-Policy and
// RateLimit headers and [Decision.Rule]. It must be printable ASCII. By
// default it is the key prefix without its trailing colons; each [Rule] of a
// route needs its own.
func Name(name string) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if name == "" || !rule.PrintableASCII(name) {
			return fmt.Errorf("Name(%q): the name must be non-empty printable ASCII", name)
		}
		r.Name = name
		return nil
	})
}

// Window sets the length of the window. The default is [DefaultWindow]. It
// must be from 1 ms to about 31 years and is kept at microsecond precision;
// 250*time.Millisecond works as written.
func Window(d time.Duration) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		w, err := rule.CheckWindow(d)
		if err == nil {
			r.Rate.Window = w
		}
		return err
	})
}

// Limit sets how many requests are admitted per window. The default is
// [DefaultLimit]. It must be between 1 and 1e9, and at most 100,000 for a
// [SlidingLog], which New checks.
func Limit(n int) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		err := rule.CheckLimit(n)
		if err == nil {
			r.Rate.Limit = n
		}
		return err
	})
}

// Message sets the message of the rule's 429 body. The default is
// [DefaultMessage].
func Message(msg string) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if msg == "" {
			return fmt.Errorf("Message(%q): the message must not be empty", msg)
		}
		r.Message = msg
		return nil
	})
}

// Cost charges each request f(c) units instead of 1, for example by its
// batch size; a fixed cost is a function that returns it. A result below 1
// is charged as 1. A request that costs more than the rule can ever admit
// (the limit, or a token bucket's burst) is refused with 429 and a message
// saying so; it is never retried or queued. f runs on every request and
// must be safe for concurrent use; it must not read the request body unless
// it restores it. [Policy.Allow] takes its cost as an argument instead.
func Cost(f func(c *gin.Context) int) RuleOption {
	return ruleOption(func(r *rule.Config) error {
		if f == nil {
			return errors.New("Cost(nil): the function must not be nil")
		}
		r.Rate.CostFunc = f
		return nil
	})
}
