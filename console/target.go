package console

import (
	"errors"
	"net/netip"
	"slices"
	"strings"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// maxInput bounds every text a request gives the console.
const maxInput = 1024

var (
	errTooLong  = errors.New("the text is too long")
	errNoDims   = errors.New("this rule counts the whole route: it has no identities")
	errBadIP    = errors.New("not an IP address")
	errBadIdent = errors.New("the identity does not fit this rule: give its value, or label:value for each of its dimensions")
)

// parseIdentity turns text an operator typed, or a form of the console
// sent, into the Target of that identity's count on ri: the identity as
// the console shows it ("user:al%20ice p.id:7", or "user:<hash>" for a
// rule with HashIdentities), which ginlimit turns back
// (RuleInfo.Target), or, for a rule of one dimension, the value itself
// ("alice", "192.0.2.1"), which Peek and Reset hash as a request's would
// be.
func parseIdentity(ri ginlimit.RuleInfo, text string) (ginlimit.Target, error) {
	t := ginlimit.Target{Route: ri.Route, Rule: ri.Rule}
	text = strings.TrimSpace(text)
	switch {
	case len(text) > maxInput:
		return t, errTooLong
	case len(ri.Per) == 0:
		return t, errNoDims
	case text == "":
		return t, errBadIdent
	}
	if labelled(ri, text) {
		return ri.Target(text)
	}
	if len(ri.Per) != 1 {
		return t, errBadIdent
	}
	return t, setPart(&t, ri.Per[0], text)
}

// labelled reports whether text names an identity as the console shows
// it: a label of ri's dimensions before each colon.
func labelled(ri ginlimit.RuleInfo, text string) bool {
	for _, f := range strings.Fields(text) {
		label, _, ok := strings.Cut(f, ":")
		if !ok {
			return false
		}
		if ri.Hashed {
			label, _, _ = strings.Cut(label, "+")
		}
		if !slices.Contains(ri.Per, label) && !(label == "anon" && slices.Contains(ri.Per, "user")) {
			return false
		}
	}
	return true
}

// setPart sets the Target field of one dimension.
func setPart(t *ginlimit.Target, label, value string) error {
	switch {
	case label == "user":
		t.User = value
	case label == "ip" || label == "anon":
		ip, err := netip.ParseAddr(value)
		if err != nil {
			return errBadIP
		}
		t.IP = ip
	case len(label) > 2 && label[1] == '.':
		t.Values = map[string]string{label[2:]: value}
	default:
		return errBadIdent
	}
	return nil
}
