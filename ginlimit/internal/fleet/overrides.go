package fleet

import (
	"strconv"
	"strings"
	"time"

	"github.com/ginlimit/ginlimit/lua"
)

// The quotas of LimitsKey, which package ginlimit exports and documents:
// SetLimit refuses an override past its kind's, and NewOverrides keeps no
// more than they allow.
const (
	MaxRuleOverrides     = 1_000
	MaxIdentityOverrides = 10_000
)

// Setting is the limit and window of a stored override (a window of 0:
// the rule's own).
type Setting struct {
	Limit  int
	Window time.Duration
}

// RuleScope is where a rule's or a plan's override holds: the rule's Key
// prefix (a plan's with its tag), the scope unescaped, and the rule's
// name, escaped, when its keys carry it ("" when they do not).
type RuleScope struct {
	Prefix, Method, Route, Name string
}

// WhoKey is where an identity's override holds: the Key prefix of the
// rule a route declares, and its count key past the algorithm's tag.
type WhoKey struct {
	Prefix, Rest string
}

// Canonical reports whether f is the field that package ginlimit writes
// for k (the form a rule's key has, escaped as in a key): a field written
// by hand in another form names no count, and is left out.
type Canonical func(k RuleScope, f string) bool

// Overrides is LimitsKey as one fleet loaded it, parsed once per change:
// every policy of the Limiter on that client reads it, and none keeps a
// copy. It is never changed once made.
type Overrides struct {
	Rules    map[RuleScope]Setting // rules' and plans' overrides
	Who      map[WhoKey]Setting    // identities' overrides
	Prefixes map[string]bool       // the Key prefixes (a plan's with its tag) some override is under
}

// NewOverrides parses LimitsKey's fields (field, value, field, value...),
// keeping at most MaxRuleOverrides rules' and MaxIdentityOverrides
// identities' overrides, and leaving out what does not parse, or is not
// canonical.
func NewOverrides(fields []string, canonical Canonical) *Overrides {
	ov := &Overrides{Rules: map[RuleScope]Setting{}, Who: map[WhoKey]Setting{}, Prefixes: map[string]bool{}}
	for i := 0; i+1 < len(fields); i += 2 {
		f := fields[i]
		set, ok := ParseSetting(fields[i+1])
		if !ok {
			continue
		}
		if k, ok := ParseRuleField(f, canonical); ok {
			if len(ov.Rules) < MaxRuleOverrides {
				ov.Rules[k] = set
				ov.Prefixes[k.Prefix] = true
			}
			continue
		}
		// An identity's: its prefix ends where the count's hash tag
		// begins (a Key prefix holds no '{').
		if i := strings.IndexByte(f, '{'); i > 0 && !strings.HasSuffix(f, " *") && len(ov.Who) < MaxIdentityOverrides {
			ov.Who[WhoKey{Prefix: f[:i], Rest: f[i:]}] = set
			ov.Prefixes[f[:i]] = true
		}
	}
	return ov
}

// ParseRuleField is the scope of a rule's or a plan's field f; ok is
// false when f is not one, or not canonical.
func ParseRuleField(f string, canonical Canonical) (k RuleScope, ok bool) {
	rest, ok := strings.CutSuffix(f, " *")
	i := strings.IndexByte(rest, '{')
	j := strings.IndexByte(rest, '}')
	if !ok || i < 1 || j < i || strings.ContainsRune(rest[:i], '}') {
		return RuleScope{}, false
	}
	m, r, ok := strings.Cut(rest[i+1:j], " ")
	k = RuleScope{Prefix: rest[:i], Method: unescape(m), Route: unescape(r)}
	tail := rest[j+1:]
	if tail != "" {
		name, named := strings.CutPrefix(tail, " rule:")
		if !named || name == "" {
			return RuleScope{}, false
		}
		k.Name = name
	}
	if !ok || k.Method == "" || k.Route == "" || !canonical(k, f) {
		return RuleScope{}, false // no key of a rule names it
	}
	return k, true
}

// unescape undoes a key's escaping ("%XX"); a text that escaping could not
// have written comes out as one that is not written back the same.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseSetting parses an override's value, "<limit> <window µs>": a limit
// and a window of 0 to lua.MaxWindow µs; the rule's checks (its compiling)
// come after.
func ParseSetting(s string) (Setting, bool) {
	ls, ws, ok := strings.Cut(s, " ")
	limit, err1 := strconv.Atoi(ls)
	us, err2 := strconv.ParseInt(ws, 10, 64)
	if !ok || err1 != nil || err2 != nil || us < 0 || us > lua.MaxWindow {
		return Setting{}, false
	}
	return Setting{Limit: limit, Window: time.Duration(us) * time.Microsecond}, true
}
