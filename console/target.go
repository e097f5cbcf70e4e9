package console

import (
	"errors"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// maxInput bounds every text a request gives the console.
const maxInput = 1024

var (
	errTooLong  = errors.New("the text is too long")
	errNoDims   = errors.New("this rule counts the whole route: it has no identities")
	errHashed   = errors.New("this rule keeps identities as a keyed hash: type the identity itself, not its hash")
	errBadIP    = errors.New("not an IP address")
	errBadIdent = errors.New("the identity does not fit this rule: give its value, or label:value for each of its dimensions")
)

// parseIdentity turns text an operator typed into the Target of that
// identity's count on ri: the value itself for a rule of one dimension
// ("alice", "192.0.2.1"), or the identity as the console shows it,
// "<label>:<value>" for each dimension, separated by spaces, with the
// values escaped as in a key ("user:al%20ice p.id:7"). A hashed identity
// cannot be turned back: with HashIdentities the operator types the
// identity, which Peek and Reset hash as a request's would be.
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
	parts := labelled(ri.Per, text)
	if parts == nil {
		if len(ri.Per) != 1 {
			return t, errBadIdent
		}
		parts = map[string]string{ri.Per[0]: text}
	} else if ri.Hashed {
		return t, errHashed
	}
	for label, value := range parts {
		if err := setPart(&t, label, value); err != nil {
			return t, err
		}
	}
	return t, nil
}

// labelled splits "<label>:<escaped value> ..." over the labels of per,
// or returns nil when text is not in that form.
func labelled(per []string, text string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(text) {
		label, value, ok := strings.Cut(f, ":")
		if !ok || (!slices.Contains(per, label) && !(label == "anon" && slices.Contains(per, "user"))) {
			return nil
		}
		v, err := url.PathUnescape(value)
		if err != nil {
			return nil
		}
		if _, dup := out[label]; dup {
			return nil
		}
		out[label] = v
	}
	return out
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
		if t.Values == nil {
			t.Values = map[string]string{}
		}
		t.Values[label[2:]] = value
	default:
		return errBadIdent
	}
	return nil
}
