package identity_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ginlimit/ginlimit/identity"
)

// ipRequest returns a request from the TCP peer remoteAddr carrying one
// X-Forwarded-For header line per element of xff, in order.
func ipRequest(remoteAddr string, xff ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, line := range xff {
		r.Header.Add("X-Forwarded-For", line)
	}
	return r
}

func mustNewIP(t *testing.T, trusted ...string) *identity.IP {
	t.Helper()
	ip, err := identity.NewIP(trusted...)
	if err != nil {
		t.Fatalf("NewIP(%q): %v", trusted, err)
	}
	if ip == nil {
		t.Fatalf("NewIP(%q) returned a nil *IP and no error", trusted)
	}
	return ip
}

// trustNobody returns every way of getting a resolver that trusts no proxy:
// they must all behave the same.
func trustNobody(t *testing.T) map[string]*identity.IP {
	t.Helper()
	return map[string]*identity.IP{
		"NewIP()":    mustNewIP(t),
		"zero IP{}":  &identity.IP{},
		"nil *IP":    nil,
		"other nets": mustNewIP(t, "10.0.0.0/8", "2001:db8:ffff::/48"),
	}
}

func checkAddr(t *testing.T, got netip.Addr, err error, want string) {
	t.Helper()
	if err != nil {
		t.Fatalf("Resolve: unexpected error %v", err)
	}
	// == on netip.Addr compares the family and the zone too, so this also
	// checks that ::ffff:a.b.c.d came back as IPv4 and zones were dropped.
	if w := netip.MustParseAddr(want); got != w {
		t.Fatalf("Resolve = %v (4in6=%v zone=%q), want %v", got, got.Is4In6(), got.Zone(), w)
	}
}

// peerCase is a request from a TCP peer with X-Forwarded-For lines, and
// the client address a resolver that trusts no proxy must find.
type peerCase struct {
	name       string
	remoteAddr string
	xff        []string
	want       string
}

// untrustedPeerCases: whatever X-Forwarded-For says, an untrusted peer is
// the client.
func untrustedPeerCases() []peerCase {
	return []peerCase{
		{"IPv4 peer", "203.0.113.7:51234", nil, "203.0.113.7"},
		{"IPv6 peer", "[2001:db8::7]:443", nil, "2001:db8::7"},
		{"peer without port", "203.0.113.7", nil, "203.0.113.7"},
		{"spoofed XFF ignored", "203.0.113.7:51234", []string{"198.51.100.1"}, "203.0.113.7"},
		{"spoofed XFF list ignored", "203.0.113.7:51234", []string{"198.51.100.1, 10.0.0.1"}, "203.0.113.7"},
		{"spoofed XFF lines ignored", "203.0.113.7:51234", []string{"198.51.100.1", "192.0.2.9"}, "203.0.113.7"},
		{"spoofed XFF to a trusted-looking hop ignored", "203.0.113.7:51234", []string{"10.0.0.1"}, "203.0.113.7"},
		{"IPv6 peer with spoofed XFF", "[2001:db8::7]:443", []string{"2001:db8:ffff::1"}, "2001:db8::7"},
	}
}

func TestIPResolveWithoutTrustedProxyUsesPeer(t *testing.T) {
	t.Parallel()
	for _, tc := range untrustedPeerCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for rname, ip := range trustNobody(t) {
				t.Run(rname, func(t *testing.T) {
					got, err := ip.Resolve(ipRequest(tc.remoteAddr, tc.xff...))
					checkAddr(t, got, err, tc.want)
				})
			}
		})
	}
}

// proxyCase is a request through proxies, and the client address a
// resolver trusting the proxies trusted must find.
type proxyCase struct {
	name       string
	trusted    []string
	remoteAddr string
	xff        []string
	want       string
}

// trustedProxyCases: X-Forwarded-For is walked from the right over trusted
// hops only, and addresses are normalised.
func trustedProxyCases() []proxyCase {
	return []proxyCase{
		{
			name:       "single hop",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "no XFF: the trusted peer itself",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			want:       "10.0.0.1",
		},
		{
			name:       "client-written hops left of the client are ignored",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"6.6.6.6, 7.7.7.7, 203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "trusted hops skipped right to left",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"6.6.6.6, 203.0.113.7, 10.1.1.1, 10.2.2.2"},
			want:       "203.0.113.7",
		},
		{
			name:       "client spoofs a trusted address to the left",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"10.9.9.9, 203.0.113.7, 10.2.2.2"},
			want:       "203.0.113.7",
		},
		{
			name:       "multiple lines combined in order",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"6.6.6.6, 203.0.113.7", "10.1.1.1", "10.2.2.2"},
			want:       "203.0.113.7",
		},
		{
			name:       "last line is the right-most",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7", "198.51.100.9"},
			want:       "198.51.100.9",
		},
		{
			name:       "walk continues into earlier lines",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"6.6.6.6", "198.51.100.9, 10.0.0.5", "10.0.0.6"},
			want:       "198.51.100.9",
		},
		{
			name:       "all hops trusted: left-most",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"10.0.0.9, 10.0.0.8", "10.0.0.7"},
			want:       "10.0.0.9",
		},
		{
			name:       "everything trusted with 0.0.0.0/0: left-most",
			trusted:    []string{"0.0.0.0/0"},
			remoteAddr: "192.0.2.1:5000",
			xff:        []string{"203.0.113.7, 198.51.100.9"},
			want:       "203.0.113.7",
		},
		{
			name:       "unparsable hop: last trusted hop before it",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7, garbage, 10.0.0.8"},
			want:       "10.0.0.8",
		},
		{
			name:       "unparsable right-most hop: the peer",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7, unknown"},
			want:       "10.0.0.1",
		},
		{
			name:       "unparsable hop in a later line",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7", "10.0.0.4, 999.1.1.1", "10.0.0.3"},
			want:       "10.0.0.3",
		},
		{
			name:       "IPv4 hops with ports",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7:80, 10.0.0.8:443"},
			want:       "203.0.113.7",
		},
		{
			name:       "bracketed IPv6 hop with port",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"[2001:db8::1]:443"},
			want:       "2001:db8::1",
		},
		{
			name:       "trusted IPv6 hop with port is skipped",
			trusted:    []string{"2001:db8:ffff::/48"},
			remoteAddr: "[2001:db8:ffff::1]:443",
			xff:        []string{"203.0.113.7, [2001:db8:ffff::2]:8443"},
			want:       "203.0.113.7",
		},
		{
			name:       "spaces around entries",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"  203.0.113.7  ,\t 10.0.0.8 "},
			want:       "203.0.113.7",
		},
		{
			name:       "empty entries skipped",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7,, ,10.0.0.8,", "", " , "},
			want:       "203.0.113.7",
		},
		{
			name:       "only empty entries: the peer",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{",,", " "},
			want:       "10.0.0.1",
		},
		{
			name:       "IPv6 CIDR",
			trusted:    []string{"2001:db8:ffff::/48"},
			remoteAddr: "[2001:db8:ffff::1]:443",
			xff:        []string{"2001:db8:1::5, 2001:db8:ffff::2"},
			want:       "2001:db8:1::5",
		},
		{
			name:       "IPv6 hop outside the trusted IPv6 CIDR",
			trusted:    []string{"2001:db8:ffff::/48"},
			remoteAddr: "[2001:db8:ffff::1]:443",
			xff:        []string{"2001:db8:ffff::9, 2001:db8:fffe::2"},
			want:       "2001:db8:fffe::2",
		},
		{
			name:       "IPv4 and IPv6 lists mixed",
			trusted:    []string{"10.0.0.0/8", "2001:db8:ffff::/48"},
			remoteAddr: "[2001:db8:ffff::1]:443",
			xff:        []string{"198.51.100.9, 10.0.0.2, 2001:db8:ffff::2"},
			want:       "198.51.100.9",
		},
		{
			name:       "single IPv4 address without /",
			trusted:    []string{"192.0.2.7"},
			remoteAddr: "192.0.2.7:1",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "single IPv4 address is a /32, not wider",
			trusted:    []string{"192.0.2.7"},
			remoteAddr: "192.0.2.8:1",
			xff:        []string{"203.0.113.7"},
			want:       "192.0.2.8",
		},
		{
			name:       "single address hop next to a /32",
			trusted:    []string{"192.0.2.7"},
			remoteAddr: "192.0.2.7:1",
			xff:        []string{"203.0.113.7, 192.0.2.6"},
			want:       "192.0.2.6",
		},
		{
			name:       "single IPv6 address without /",
			trusted:    []string{"2001:db8::7"},
			remoteAddr: "[2001:db8::7]:1",
			xff:        []string{"2001:db8::99"},
			want:       "2001:db8::99",
		},
		{
			name:       "single IPv6 address is a /128, not wider",
			trusted:    []string{"2001:db8::7"},
			remoteAddr: "[2001:db8::8]:1",
			xff:        []string{"2001:db8::99"},
			want:       "2001:db8::8",
		},
		{
			name:       "spaces around a trusted proxy",
			trusted:    []string{" 10.0.0.0/8 "},
			remoteAddr: "10.0.0.1:5000",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "CIDR with host bits is masked",
			trusted:    []string{"10.1.2.3/8"},
			remoteAddr: "10.200.0.1:5000",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "IPv4-mapped CIDR trusts IPv4 peers",
			trusted:    []string{"::ffff:10.0.0.0/104"},
			remoteAddr: "10.1.2.3:80",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "IPv4-mapped CIDR trusts IPv4-mapped peers",
			trusted:    []string{"::ffff:10.0.0.0/104"},
			remoteAddr: "[::ffff:10.1.2.3]:80",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "IPv4-mapped CIDR keeps its length",
			trusted:    []string{"::ffff:10.0.0.0/104"},
			remoteAddr: "11.1.2.3:80",
			xff:        []string{"203.0.113.7"},
			want:       "11.1.2.3",
		},
		{
			name:       "whole IPv4-mapped space /96 trusts every IPv4 peer",
			trusted:    []string{"::ffff:0:0/96"},
			remoteAddr: "192.0.2.1:80",
			xff:        []string{"203.0.113.7, 198.51.100.9"},
			want:       "203.0.113.7",
		},
		{
			name:       "IPv4-mapped single address",
			trusted:    []string{"::ffff:10.0.0.1"},
			remoteAddr: "10.0.0.1:80",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "IPv4 CIDR trusts IPv4-mapped peers",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "[::ffff:10.0.0.1]:80",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
		{
			name:       "IPv4-mapped hops normalised and matched",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:80",
			xff:        []string{"::ffff:203.0.113.7, [::ffff:10.0.0.8]:443"},
			want:       "203.0.113.7",
		},
		{
			name:       "zone dropped from a hop",
			trusted:    []string{"10.0.0.0/8"},
			remoteAddr: "10.0.0.1:80",
			xff:        []string{"fe80::1%eth0"},
			want:       "fe80::1",
		},
		{
			name:       "zoned trusted address matches the zoned peer",
			trusted:    []string{"fe80::1%eth0"},
			remoteAddr: "[fe80::1%eth0]:80",
			xff:        []string{"203.0.113.7"},
			want:       "203.0.113.7",
		},
	}
}

func TestIPResolveTrustedProxies(t *testing.T) {
	t.Parallel()
	for _, tc := range trustedProxyCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ip := mustNewIP(t, tc.trusted...)
			got, err := ip.Resolve(ipRequest(tc.remoteAddr, tc.xff...))
			checkAddr(t, got, err, tc.want)
		})
	}
}

// normalisedPeerCases: a peer address comes back as plain IPv4 or IPv6
// text, with no zone.
func normalisedPeerCases() []peerCase {
	return []peerCase{
		{"IPv4-mapped with port", "[::ffff:192.0.2.1]:1234", nil, "192.0.2.1"},
		{"IPv4-mapped without port", "::ffff:192.0.2.1", nil, "192.0.2.1"},
		{"zone dropped", "[fe80::1%eth0]:80", nil, "fe80::1"},
		{"zone dropped without port", "fe80::1%eth0", nil, "fe80::1"},
		{"IPv6 unchanged", "[2001:db8::1]:80", nil, "2001:db8::1"},
	}
}

func TestIPResolveNormalisesPeer(t *testing.T) {
	t.Parallel()
	for _, tc := range normalisedPeerCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for rname, ip := range trustNobody(t) {
				t.Run(rname, func(t *testing.T) {
					got, err := ip.Resolve(ipRequest(tc.remoteAddr))
					checkAddr(t, got, err, tc.want)
					if got.String() != tc.want {
						t.Fatalf("Resolve().String() = %q, want %q", got.String(), tc.want)
					}
				})
			}
		})
	}
}

// noClientIPCases are remote addresses that hold no IP address.
func noClientIPCases() []struct{ name, remoteAddr string } {
	return []struct{ name, remoteAddr string }{
		{"empty", ""},
		{"unix socket", "@"},
		{"unix path", "/run/app.sock"},
		{"port only", ":8080"},
		{"empty brackets", "[]:80"},
		{"host name", "localhost:80"},
		{"bad IPv4", "999.0.0.1:80"},
	}
}

func TestIPResolveNoClientIP(t *testing.T) {
	t.Parallel()
	for _, tc := range noClientIPCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resolvers := trustNobody(t)
			resolvers["trust everything"] = mustNewIP(t, "0.0.0.0/0", "::/0")
			for rname, ip := range resolvers {
				t.Run(rname, func(t *testing.T) {
					// A trusted-looking XFF must not be used as a fallback.
					got, err := ip.Resolve(ipRequest(tc.remoteAddr, "203.0.113.7"))
					if !errors.Is(err, identity.ErrNoClientIP) {
						t.Fatalf("Resolve(RemoteAddr=%q) error = %v, want one wrapping ErrNoClientIP", tc.remoteAddr, err)
					}
					if got.IsValid() {
						t.Fatalf("Resolve(RemoteAddr=%q) = %v with an error, want the zero Addr", tc.remoteAddr, got)
					}
					// No identity in error texts: the address, however
					// malformed, may be one.
					if tc.remoteAddr != "" && strings.Contains(err.Error(), tc.remoteAddr) {
						t.Errorf("error %q repeats the remote address %q", err, tc.remoteAddr)
					}
				})
			}
		})
	}
}

// badProxyCase is a list of trusted proxies NewIP refuses, and the value
// its error must name.
type badProxyCase struct {
	name    string
	trusted []string
	bad     string
}

func badProxyCases() []badProxyCase {
	return []badProxyCase{
		{"prefix too long", []string{"10.0.0.0/33"}, "10.0.0.0/33"},
		{"IPv6 prefix too long", []string{"2001:db8::/129"}, "2001:db8::/129"},
		{"missing length", []string{"10.0.0.0/"}, "10.0.0.0/"},
		{"not an address", []string{"not-an-ip"}, "not-an-ip"},
		{"host name", []string{"proxy.internal"}, "proxy.internal"},
		{"bad octet", []string{"300.1.1.1"}, "300.1.1.1"},
		{"empty", []string{""}, ""},
		{"zone in a prefix", []string{"fe80::1%eth0/64"}, "fe80::1%eth0/64"},
		{"with a port", []string{"10.0.0.1:80"}, "10.0.0.1:80"},
		{"bad one after a good one", []string{"10.0.0.0/8", "bogus/8"}, "bogus/8"},
		{"trimmed value named", []string{"  bogus  "}, "bogus"},
	}
}

func TestNewIPRejectsBadProxy(t *testing.T) {
	t.Parallel()
	for _, tc := range badProxyCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ip, err := identity.NewIP(tc.trusted...)
			if err == nil {
				t.Fatalf("NewIP(%q) = %v, nil; want an error", tc.trusted, ip)
			}
			if ip != nil {
				t.Errorf("NewIP(%q) returned a resolver with its error", tc.trusted)
			}
			if q := strconv.Quote(tc.bad); !strings.Contains(err.Error(), q) {
				t.Errorf("NewIP(%q) error %q does not name %s", tc.trusted, err, q)
			}
		})
	}
}

func TestIPResolveConcurrent(t *testing.T) {
	t.Parallel()
	ip := mustNewIP(t, "10.0.0.0/8")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			want := netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})
			r := ipRequest("10.0.0.1:5000", fmt.Sprintf("6.6.6.6, %v, 10.0.0.%d", want, i))
			got, err := ip.Resolve(r)
			if err != nil || got != want {
				errs <- fmt.Errorf("goroutine %d: Resolve = %v, %v; want %v", i, got, err, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestIPv6Bucket(t *testing.T) {
	t.Parallel()
	def := &identity.IP{}
	for _, tc := range []struct {
		ip   *identity.IP
		addr string
		want string
	}{
		{def, "192.0.2.7", "192.0.2.7/32"},
		{def, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{nil, "2001:db8:1:2::9", "2001:db8:1:2::/64"},
	} {
		if got := tc.ip.Bucket(netip.MustParseAddr(tc.addr)).String(); got != tc.want {
			t.Errorf("Bucket(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
	p48, err := def.WithIPv6Prefix(48)
	if err != nil {
		t.Fatal(err)
	}
	if got := p48.Bucket(netip.MustParseAddr("2001:db8:1:2::9")).String(); got != "2001:db8:1::/48" {
		t.Errorf("/48 bucket %s", got)
	}
	p128, _ := def.WithIPv6Prefix(128)
	if got := p128.Bucket(netip.MustParseAddr("2001:db8::9")).String(); got != "2001:db8::9/128" {
		t.Errorf("/128 bucket %s", got)
	}
	for _, bad := range []int{0, 129, -1} {
		if _, err := def.WithIPv6Prefix(bad); err == nil {
			t.Errorf("WithIPv6Prefix(%d) accepted", bad)
		}
	}
}

// TestIPClientBucket: ClientBucket is the bucket of the client Resolve
// finds (an IPv4 address, an IPv6 address's /64 or WithIPv6Prefix's), and
// fails as Resolve does, wrapping ErrNoClientIP.
func TestIPClientBucket(t *testing.T) {
	t.Parallel()
	proxy, err := identity.NewIP("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	p48, err := proxy.WithIPv6Prefix(48)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip     *identity.IP
		remote string
		xff    string
		want   string
	}{
		{nil, "192.0.2.7:1234", "", "192.0.2.7/32"},
		{proxy, "10.0.0.1:443", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{proxy, "192.0.2.9:443", "2001:db8:1:2:3:4:5:6", "192.0.2.9/32"},
		{p48, "[2001:db8:7:8::9]:443", "", "2001:db8:7::/48"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got, err := tc.ip.ClientBucket(r); err != nil || got.String() != tc.want {
			t.Errorf("ClientBucket(%s, XFF %q) = %v, %v; want %s", tc.remote, tc.xff, got, err, tc.want)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "@unix"
	if got, err := proxy.ClientBucket(r); !errors.Is(err, identity.ErrNoClientIP) || got.IsValid() {
		t.Errorf("ClientBucket(%q) = %v, %v; want an error wrapping ErrNoClientIP", r.RemoteAddr, got, err)
	}
}

// platformCase is the Cf-Connecting-Ip values of a request from
// 203.0.113.1, whether the resolver is configured to read that header, and
// the client it must find.
type platformCase struct {
	values     []string
	configured bool
	want       string
}

func platformCases() []platformCase {
	return []platformCase{
		{[]string{"198.51.100.7"}, true, "198.51.100.7"},
		{[]string{"::ffff:198.51.100.8"}, true, "198.51.100.8"},
		{[]string{"garbage"}, true, "203.0.113.1"},
		{[]string{"198.51.100.7", "198.51.100.9"}, true, "203.0.113.1"},
		{nil, true, "203.0.113.1"},
		// Not configured: the header means nothing.
		{[]string{"198.51.100.7"}, false, "203.0.113.1"},
	}
}

func TestPlatformHeader(t *testing.T) {
	t.Parallel()
	base, err := identity.NewIP("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := base.WithPlatformHeader("cf-connecting-ip")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range platformCases() {
		ip := cf
		if !tc.configured {
			ip = base
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.1:443"
		if tc.values != nil {
			r.Header["Cf-Connecting-Ip"] = tc.values
		}
		got, err := ip.Resolve(r)
		if err != nil || got.String() != tc.want {
			t.Errorf("Cf-Connecting-Ip %q (configured: %v): %v, %v; want %s", tc.values, tc.configured, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "a b", "x:y"} {
		if _, err := base.WithPlatformHeader(bad); err == nil {
			t.Errorf("WithPlatformHeader(%q) accepted", bad)
		}
	}
}
