package identity_test

import (
	"strconv"
	"strings"
)

// leakedText returns the first of values that the error text msg repeats,
// in part or whole, raw or quoted: a run of minLen bytes of the value (the
// whole value when it is shorter) that msg holds and base, the same
// error's fixed wording, does not. A shorter run may be part of the
// wording by chance ("identity" in a value is in every error's text).
func leakedText(msg, base string, minLen int, values ...string) (string, bool) {
	runs := map[int]map[string]bool{} // msg's runs of n bytes that base lacks
	holds := func(w string) bool {
		n := len(w)
		if runs[n] == nil {
			runs[n] = map[string]bool{}
			for i := 0; i+n <= len(msg); i++ {
				if r := msg[i : i+n]; !strings.Contains(base, r) {
					runs[n][r] = true
				}
			}
		}
		return runs[n][w]
	}
	for _, v := range values {
		if v == "" {
			continue
		}
		q := strconv.Quote(v)
		for _, form := range []string{v, q[1 : len(q)-1]} {
			n := min(minLen, len(form))
			for i := 0; i+n <= len(form); i++ {
				if holds(form[i : i+n]) {
					return v, true
				}
			}
		}
	}
	return "", false
}
