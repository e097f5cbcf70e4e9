package identity_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/ginlimit/ginlimit/identity"
)

// refHop is the documented reading of an address from a request (a
// RemoteAddr, an X-Forwarded-For hop, a platform header): "addr",
// "addr:port" or "[addr]:port", IPv4-mapped IPv6 read as IPv4, any zone
// dropped.
func refHop(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}

// refTrusted parses NewIP's documented proxies: a CIDR or a single address
// each, blanks around them ignored; an IPv4-mapped network (of at least
// /96) is the IPv4 network it maps. It returns the first bad entry when
// there is one.
func refTrusted(entries []string) ([]netip.Prefix, string, bool) {
	var out []netip.Prefix
	for _, e := range entries {
		e = strings.TrimSpace(e)
		var p netip.Prefix
		var err error
		if strings.Contains(e, "/") {
			p, err = netip.ParsePrefix(e)
		} else {
			var a netip.Addr
			if a, err = netip.ParseAddr(e); err == nil {
				p = netip.PrefixFrom(a.WithZone(""), a.BitLen())
			}
		}
		if err != nil {
			return nil, e, false
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, "", true
}

func refTrusts(trusted []netip.Prefix, a netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refClient is the documented client of a request from peer with the
// X-Forwarded-For lines xff: an untrusted peer itself; behind trusted
// proxies, the right-most hop that is not a trusted proxy, the left-most
// hop when all are, and the last hop vouched for when one is unreadable.
func refClient(trusted []netip.Prefix, peer netip.Addr, xff []string) netip.Addr {
	if !refTrusts(trusted, peer) {
		return peer
	}
	var hops []string
	for _, line := range xff {
		for h := range strings.SplitSeq(line, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := refHop(hops[i])
		if !ok {
			return client
		}
		if !refTrusts(trusted, a) {
			return a
		}
		client = a
	}
	return client
}

// lines splits fuzz text into header lines at "\n"; "" is no line at all.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// FuzzIPResolve: NewIP over trusted proxies (comma-separated), then
// Resolve of a request from remote with X-Forwarded-For lines xff (split
// at newlines) and Cf-Connecting-Ip lines platform, by resolvers with and
// without that platform header.
//
//   - NewIP fails exactly when an entry is neither a CIDR nor an address,
//     naming that entry.
//   - Resolve returns a valid, normalised address (no IPv4-mapped form, no
//     zone), or fails, wrapping ErrNoClientIP, exactly when the remote
//     address is not an IP address and no platform address applies.
//   - An untrusted peer is the client whatever X-Forwarded-For says; an
//     address from X-Forwarded-For is taken only from a trusted peer, by
//     the right-to-left walk (refClient).
//   - The platform header is taken when, and only when, it is configured
//     and holds one readable address.
//   - The error repeats neither the remote address nor any header value,
//     nor 4 bytes of one that its fixed wording lacks.
//   - The address's bucket holds it: itself for IPv4, its /64 for IPv6.
//   - ClientBucket is the bucket of Resolve's address, or Resolve's error.
func FuzzIPResolve(f *testing.F) {
	for _, tc := range untrustedPeerCases() {
		f.Add("", tc.remoteAddr, strings.Join(tc.xff, "\n"), "")
	}
	for _, tc := range normalisedPeerCases() {
		f.Add("10.0.0.0/8", tc.remoteAddr, "203.0.113.7", "")
	}
	for _, tc := range trustedProxyCases() {
		f.Add(strings.Join(tc.trusted, ","), tc.remoteAddr, strings.Join(tc.xff, "\n"), "")
	}
	for _, tc := range noClientIPCases() {
		f.Add("0.0.0.0/0,::/0", tc.remoteAddr, "203.0.113.7", "")
	}
	for _, tc := range badProxyCases() {
		f.Add(strings.Join(tc.trusted, ","), "10.0.0.1:5000", "203.0.113.7", "")
	}
	for _, tc := range platformCases() {
		f.Add("10.0.0.0/8", "203.0.113.1:443", "", strings.Join(tc.values, "\n"))
	}
	// The error of a request with no address and no headers: the wording
	// no input may be found in.
	_, baseErr := (&identity.IP{}).Resolve(&http.Request{Header: http.Header{}})
	if baseErr == nil {
		f.Fatal("Resolve with no remote address did not fail")
	}
	base := baseErr.Error()
	f.Fuzz(func(t *testing.T, trusted, remote, xff, platform string) {
		entries := strings.Split(trusted, ",")
		if trusted == "" {
			entries = nil
		}
		ip, err := identity.NewIP(entries...)
		ref, bad, ok := refTrusted(entries)
		switch {
		case ok != (err == nil):
			t.Fatalf("NewIP(%q) = %v, want an error: %v", entries, err, !ok)
		case err != nil && (ip != nil || !strings.Contains(err.Error(), strconv.Quote(bad))):
			t.Fatalf("NewIP(%q) = %v, %v; want only an error naming %q", entries, ip, err, bad)
		case err != nil:
			return
		}
		cf, err := ip.WithPlatformHeader("cf-connecting-ip")
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		for _, l := range lines(xff) {
			r.Header.Add("X-Forwarded-For", l)
		}
		for _, l := range lines(platform) {
			r.Header.Add("Cf-Connecting-Ip", l)
		}
		peer, peerOK := refHop(remote)
		for _, res := range []struct {
			ip       *identity.IP
			platform bool
		}{{ip, false}, {cf, true}} {
			got, err := res.ip.Resolve(r)
			var want netip.Addr
			if vs := lines(platform); res.platform && len(vs) == 1 {
				if a, ok := refHop(strings.TrimSpace(vs[0])); ok {
					want = a
				}
			}
			if !want.IsValid() && peerOK {
				want = refClient(ref, peer, lines(xff))
			}
			if !want.IsValid() {
				if err == nil || !errors.Is(err, identity.ErrNoClientIP) || got.IsValid() {
					t.Fatalf("Resolve(%q, XFF %q, platform %q) = %v, %v; want an error wrapping ErrNoClientIP", remote, xff, platform, got, err)
				}
				if v, ok := leakedText(err.Error(), base, 4, append(append([]string{remote}, lines(xff)...), lines(platform)...)...); ok {
					t.Fatalf("Resolve's error %q repeats the request's %q", err, v)
				}
				if b, bErr := res.ip.ClientBucket(r); b.IsValid() || bErr == nil || bErr.Error() != err.Error() {
					t.Fatalf("ClientBucket = %v, %v; want no bucket and Resolve's error %v", b, bErr, err)
				}
				continue
			}
			if err != nil || got != want {
				t.Fatalf("Resolve(%q, XFF %q, platform %q; trusted %q, platform header %v) = %v, %v; want %v", remote, xff, platform, entries, res.platform, got, err, want)
			}
			if got.Is4In6() || got.Zone() != "" {
				t.Fatalf("Resolve = %v (4in6 %v, zone %q): not normalised", got, got.Is4In6(), got.Zone())
			}
			bits := 32
			if got.Is6() {
				bits = identity.DefaultIPv6Prefix
			}
			if b := res.ip.Bucket(got); !b.Contains(got) || b.Bits() != bits {
				t.Fatalf("Bucket(%v) = %v, want the /%d holding it", got, b, bits)
			}
			if b, err := res.ip.ClientBucket(r); err != nil || b != res.ip.Bucket(got) {
				t.Fatalf("ClientBucket = %v, %v; want %v, the bucket of Resolve's %v", b, err, res.ip.Bucket(got), got)
			}
		}
	})
}
