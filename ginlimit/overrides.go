package ginlimit

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ginlimit/ginlimit/ginlimit/internal/decide"
	"github.com/ginlimit/ginlimit/ginlimit/internal/rule"

	"github.com/ginlimit/ginlimit/ginlimit/internal/fleet"
)

// Limits that change at run time: an override replaces a rate rule's limit
// and window while the service runs, for the rule, for one of its plans
// ([LimitBy]) or for one identity. Overrides live in Redis, in one hash
// (LimitsKey), so every instance sees them; a change is told on
// ResetChannel, and the Limiter's fleet (package fleet) loads the hash and
// gives each of its policies a new view (internal/decide). A request reads the
// view in process: overrides add no Redis call to a decision.
//
// An override compiles into a rule of its own with rule.CompileRate, the code
// that compiles a rule at start-up, so that a value the scripts would
// refuse is refused when it is set (SetLimit), naming what is wrong. Its
// rule goes through the several-rule script, whose settings are arguments:
// values an operator sets never load a script into Redis's script cache.

const (
	// LimitsKey is the Redis hash that holds the overrides set with
	// [Policy.SetLimit], one field per override, named as the keys of the
	// counts it holds for are, without the algorithm's tag: a rule's is
	// "rate_limit:{GET /api/search} *" (" rule:<name>" before " *" where the
	// keys carry the rule's name), a plan's has the plan's tag after the
	// prefix, an identity's is its count's key ("rate_limit:{GET /api/search
	// user:alice}"). Each part is escaped as in a key, so a caller never
	// chooses a field's form. The value is the limit and the window in µs
	// ("5 0": a window of 0 keeps the rule's); a field that does not parse or
	// compile for its rule is left out. LimitsKey+":version", in the same
	// Cluster slot, tells the instances to load it again: to go back to the
	// configuration, clear each override, or delete both keys.
	LimitsKey = fleet.LimitsKey
	// MaxRuleOverrides bounds how many rules' and plans' overrides
	// LimitsKey holds, for every Limiter on that Redis together: SetLimit
	// refuses a new one beyond it. It is a quota of its own, apart from
	// the identities', so that however many identities have one, a rule
	// can always get its first emergency override.
	MaxRuleOverrides = fleet.MaxRuleOverrides
	// MaxIdentityOverrides bounds how many identities' overrides LimitsKey
	// holds, for every Limiter on that Redis together: SetLimit refuses a
	// new one beyond it, so that no caller can grow the instances' memory
	// without bound. Each instance keeps them parsed once per backend; a
	// policy compiles one only when a request of its identity comes.
	MaxIdentityOverrides = fleet.MaxIdentityOverrides
	// OverridePoll is how often, at the longest, each Limiter asks Redis
	// whether the overrides changed, in case it missed the notice of a
	// change on [ResetChannel]: an instance that hears the notice applies
	// the change at once, one that missed it within OverridePoll and one
	// the bounds of
	// the two calls that read them (1 s each), 5 s in all, while Redis
	// answers. The instance
	// that set it applies it before SetLimit returns. The version key,
	// LimitsKey+":version", is random, so that a Redis that lost both keys
	// and saw as many changes since cannot show an instance the version it
	// last loaded.
	OverridePoll = fleet.OverridePoll
)

// ErrBadLimit is wrapped by the error of an override [Policy.SetLimit]
// refuses: a limit or window the rule's algorithm cannot take (as start-up
// would refuse it), or one override more than its quota
// ([MaxRuleOverrides], [MaxIdentityOverrides]). Its text says
// what is wrong, naming the option as start-up does, and holds neither an
// identity nor a Redis error, so an admin API may show it.
var ErrBadLimit = decide.ErrBadLimit

// SetLimit overrides the limit and window of t's rule while the service
// runs, on every instance: the rule's own (t names no plan and no
// identity), a plan's (t.Plan), or one identity's (t.User, t.IP, t.Values,
// or t.Key for [Policy.Allow]). The most specific applies: the identity's,
// then its plan's, then the options. A window of 0 keeps the rule's; a
// limit of 0 clears the override. A rule's or a plan's override holds on
// t.Route alone ("Policy.Allow" for the keys of Allow); a [Shared] rule's
// holds for its group, so t.Route may be empty.
//
// The override is checked as start-up checks the rule (errors wrap
// [ErrBadLimit]; a Target that names no rate rule, [ErrBadTarget]), stored
// in Redis ([LimitsKey]), and applied here before SetLimit returns, on
// every other instance when its notice on [ResetChannel] arrives, or else
// within [OverridePoll] and one call's bound. It counts on the rule's keys,
// so a change never hands out budget (docs/operations.md).
func (p *Policy) SetLimit(ctx context.Context, t Target, limit int, window time.Duration) error {
	r, field, src, err := p.overrideOf(t)
	if err != nil {
		return err
	}
	value := ""
	if limit != 0 {
		if _, err := p.route.CompileOverride(r, limit, window, src); err != nil {
			return fmt.Errorf("ginlimit: SetLimit: rule %q: %w", r.Name, err)
		}
		value = strconv.Itoa(limit) + " " + strconv.FormatInt(window.Microseconds(), 10)
	}
	c := fleet.Change{Field: field, Value: value, Quota: MaxIdentityOverrides}
	kind := "MaxIdentityOverrides"
	if src != SourceIdentityOverride {
		c.Quota, c.Rule, kind = MaxRuleOverrides, true, "MaxRuleOverrides"
	}
	refused, applied, err := p.route.Fleet.SetLimit(ctx, p.route.Queue, p.route.Timeout, c)
	if err != nil {
		return fmt.Errorf("ginlimit: SetLimit: rule %q: %w", r.Name, err)
	}
	if refused {
		return fmt.Errorf("ginlimit: SetLimit: rule %q: %w: %s (%d) overrides of its kind are set already; clear one first", r.Name, ErrBadLimit, kind, c.Quota)
	}
	if applied != nil {
		// Stored: this instance applies it with its next poll.
		p.route.Logs.Log(ctx, p.route.Logger, slog.LevelWarn, "ginlimit: override stored, not yet applied here", slog.String("rule", r.Name), decide.ErrAttr(applied))
	}
	p.route.Log().LogAttrs(ctx, slog.LevelInfo, "ginlimit: limit override set (a limit of 0 clears it)",
		slog.String("rule", r.Name), slog.String("of", overrideNames[src]), slog.Int("limit", limit), slog.Duration("window", window))
	return nil
}

// overrideNames names, in the log, what an override of each Source is of; the
// identity itself is never logged.
var overrideNames = [...]string{SourceOverride: "rule", SourcePlanOverride: "plan", SourceIdentityOverride: "identity"}

// overrideOf resolves t to the rule an override of it is compiled from
// (the rule, or the plan's), its field in LimitsKey and its Source.
func (p *Policy) overrideOf(t Target) (*rule.Rate, string, Source, error) {
	if !t.namesIdentity() {
		r, s, err := rule.RateScope(p.route.All, t.forRule())
		if err != nil {
			return nil, "", 0, err
		}
		field := p.route.OverrideField(r, s)
		if t.Plan != "" {
			return r, field, SourcePlanOverride, nil
		}
		return r, field, SourceOverride, nil
	}
	if t.Plan != "" {
		return nil, "", 0, rule.BadTarget("an identity's override holds whatever its plan: leave Target.Plan empty")
	}
	a, err := rule.AimAt(p.route.All, t.forRule())
	if err != nil {
		return nil, "", 0, err
	}
	r, ok := a.Declared.(*rule.Rate)
	if !ok {
		return nil, "", 0, rule.BadTarget("rule %q is an in-flight rule: only a rate rule's limit can be overridden", a.Declared.Core().Name)
	}
	key := rule.BuildKey(&r.Base, p.route.Named, a.Scope, &a.Who)
	return r, r.Cfg.Prefix + key[len(r.Prefix):], SourceIdentityOverride, nil
}

// settings is the Decision of Peek for a Target that names a rule (and
// plan) only: the limit and window in force, and their source.
func (p *Policy) settings(t Target) (Decision, error) {
	x, err := rule.Find(p.route.All, t.forRule())
	if err != nil {
		return Decision{}, err
	}
	if _, ok := x.(*rule.InFlight); ok {
		b := x.Core()
		return Decision{Rule: b.Name, Limit: b.Limit}, nil
	}
	r, s, err := rule.RateScope(p.route.All, t.forRule())
	if err != nil {
		return Decision{}, err
	}
	r = p.route.InForce(r, s)
	return Decision{Rule: r.Name, Limit: r.Limit, Window: r.Window, Source: Source(r.Source)}, nil
}
