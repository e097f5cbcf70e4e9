package console

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ginlimit/ginlimit/ginlimit"
)

// FuzzParseIdentity: whatever an operator (or a forged form) types, the
// identity parser returns a Target of the rule or an error the console may
// show, never panics, and never sets a field the rule does not count per.
func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"alice", "user:al%20ice", "ip:192.0.2.1", "user:x p.id:7", "p.id:%zz", "<img src=x onerror=alert(1)>", "user:a user:b", " ", "anon:::1"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, hashed bool) {
		for _, per := range [][]string{nil, {"user"}, {"ip"}, {"user", "p.id"}, {"h.x-key"}} {
			ri := ginlimit.RuleInfo{Route: "GET /x", Rule: "r", Per: per, Hashed: hashed}
			tg, err := parseIdentity(ri, text)
			if err != nil {
				if safeError(err) == "Redis could not answer; try again" {
					t.Fatalf("parseIdentity(%q) error %v is not one the console shows", text, err)
				}
				continue
			}
			if tg.Route != ri.Route || tg.Rule != ri.Rule {
				t.Fatalf("target %+v names another rule", tg)
			}
			for name := range tg.Values {
				if !strings.Contains(strings.Join(per, " "), "."+name) {
					t.Fatalf("per %v: value %q set", per, name)
				}
			}
		}
	})
}

// FuzzParseLimit: the override's numbers parse into a limit of at least 0
// and a window of at least 0, or the console's message.
func FuzzParseLimit(f *testing.F) {
	for _, s := range [][2]string{{"5", "30"}, {"0", ""}, {"-1", "1"}, {"1", "NaN"}, {"1", "1e300"}, {"9999999999999999999", "0.5"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, limit, window string) {
		l, w, err := parseLimit(limit, window)
		if err != nil {
			if err != errBadNumber {
				t.Fatalf("error %v", err)
			}
			return
		}
		if l < 0 || w < 0 {
			t.Fatalf("parseLimit(%q, %q) = %d, %v", limit, window, l, w)
		}
	})
}

// FuzzParseBeat: a reply of Redis that is not what the script sends is
// refused or read, never a panic; its members split back as they joined.
func FuzzParseBeat(f *testing.F) {
	f.Add("GET /x\nclaim\nuser:a", int64(3))
	f.Add("no newline", int64(-1))
	f.Add("3\nclaim\nGET /x", int64(0))
	f.Fuzz(func(t *testing.T, m string, n int64) {
		reply := []any{[]any{m, n}, []any{m}, []any{m, "1.5"}, []any{m, n}}
		_, _, _, _ = parseBeat(reply, 0)
		_, _, _, _ = parseBeat([]any{m}, 0)
		if got, err := parseServed([]any{m}); err != nil || len(got) == 1 && (got[0].policy < 0 || !strings.HasSuffix(m, "\n"+got[0].rule+"\n"+got[0].route)) {
			t.Fatalf("parseServed(%q) = %+v, %v", m, got, err)
		}
		if k, ok := parseMember(m); ok && utf8.ValidString(m) && k.route+"\n"+k.rule+"\n"+k.id != m {
			t.Fatalf("parseMember(%q) = %+v", m, k)
		}
	})
}
