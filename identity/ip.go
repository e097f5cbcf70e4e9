package identity

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ErrNoClientIP is returned (wrapped) when a request carries no usable peer
// address, for example on a Unix-socket listener.
var ErrNoClientIP = errors.New("identity: no client IP address")

// IP resolves the client IP address of a request.
//
// The zero value trusts no proxy: the client is the TCP peer. Use [NewIP] to
// trust X-Forwarded-For from given proxy networks. An IP is immutable once
// made and safe for concurrent use.
type IP struct {
	trusted  []netip.Prefix
	v6bits   int    // 0 means DefaultIPv6Prefix
	platform string // a header set by the edge platform, or ""
}

// DefaultIPv6Prefix is how many leading bits of an IPv6 client address name
// its bucket by default: a /64 is what one host or one subscriber usually
// gets, and a client rotating addresses inside it must not escape its limit
// (Traefik's ipv6Subnet and GitLab do the same).
const DefaultIPv6Prefix = 64

// WithIPv6Prefix returns a copy of p that groups IPv6 clients by their
// first bits bits (1 to 128; 128 counts every address on its own).
func (p *IP) WithIPv6Prefix(bits int) (*IP, error) {
	if bits < 1 || bits > 128 {
		return nil, fmt.Errorf("identity: WithIPv6Prefix(%d): want 1 to 128", bits)
	}
	c := &IP{v6bits: bits}
	if p != nil {
		c.trusted, c.platform = p.trusted, p.platform
	}
	return c, nil
}

// WithPlatformHeader returns a copy of p that takes the client address from
// the header an edge platform sets, such as "CF-Connecting-IP" (Cloudflare)
// or "Fly-Client-IP", whenever the header holds one address. Only configure
// it when every request reaches you through that platform, which overwrites
// the header: anyone who can reach the server directly can spoof it. Without
// the header (or with a bad value) the usual peer and X-Forwarded-For rules
// apply.
func (p *IP) WithPlatformHeader(name string) (*IP, error) {
	if name == "" || strings.ContainsAny(name, " :\r\n") {
		return nil, fmt.Errorf("identity: WithPlatformHeader(%q): want a header name", name)
	}
	c := &IP{platform: http.CanonicalHeaderKey(name)}
	if p != nil {
		c.trusted, c.v6bits = p.trusted, p.v6bits
	}
	return c, nil
}

// Bucket returns the network a client address is counted in: the address
// itself for IPv4, its /64 (or the prefix of WithIPv6Prefix) for IPv6.
func (p *IP) Bucket(a netip.Addr) netip.Prefix {
	bits := a.BitLen()
	if a.Is6() {
		bits = DefaultIPv6Prefix
		if p != nil && p.v6bits != 0 {
			bits = p.v6bits
		}
	}
	pre, _ := a.Prefix(bits)
	return pre
}

// ClientBucket returns the bucket ([IP.Bucket]) of r's client address
// ([IP.Resolve]): what a limit counting per client IP counts in. It fails
// as Resolve does.
func (p *IP) ClientBucket(r *http.Request) (netip.Prefix, error) {
	a, err := p.Resolve(r)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p.Bucket(a), nil
}

// NewIP returns an IP resolver that honours X-Forwarded-For only from peers
// inside trustedProxies, each a CIDR ("10.0.0.0/8", "2001:db8::/32") or a
// single address ("192.0.2.7"). With no arguments no proxy is trusted.
func NewIP(trustedProxies ...string) (*IP, error) {
	p := &IP{}
	for _, s := range trustedProxies {
		s = strings.TrimSpace(s)
		var prefix netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			prefix, err = netip.ParsePrefix(s)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			if err == nil {
				prefix = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("identity: trusted proxy %q: %w", s, err)
		}
		if a := prefix.Addr(); a.Is4In6() && prefix.Bits() >= 96 {
			prefix = netip.PrefixFrom(a.Unmap(), prefix.Bits()-96)
		}
		p.trusted = append(p.trusted, prefix.Masked())
	}
	return p, nil
}

// Resolve returns the client address of r. It fails, wrapping
// [ErrNoClientIP], only when r.RemoteAddr holds no IP address.
func (p *IP) Resolve(r *http.Request) (netip.Addr, error) {
	if p != nil && p.platform != "" {
		if vs := r.Header[p.platform]; len(vs) == 1 {
			if a, ok := parseHop(strings.TrimSpace(vs[0])); ok {
				return a, nil
			}
		}
	}
	peer, ok := parsePeer(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: the remote address is not an IP address", ErrNoClientIP)
	}
	if p == nil || !p.trusts(peer) {
		return peer, nil
	}
	// The peer is a trusted proxy: walk X-Forwarded-For from the right. Each
	// proxy appends the address it saw, so the right-most untrusted hop is
	// the client; anything to its left was written by the client itself.
	client := peer
	lines := r.Header.Values("X-Forwarded-For")
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" {
			var hop string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				hop, rest = rest, ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			a, ok := parseHop(hop)
			if !ok {
				// A trusted proxy wrote something unparsable: stop at the
				// last hop we can vouch for.
				return client, nil
			}
			if !p.trusts(a) {
				return a, nil
			}
			client = a
		}
	}
	return client, nil
}

func (p *IP) trusts(a netip.Addr) bool {
	for _, t := range p.trusted {
		if t.Contains(a) {
			return true
		}
	}
	return false
}

// parsePeer parses a RemoteAddr, normally "addr:port" or "[addr]:port",
// without allocating in that common case.
func parsePeer(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	return parseHop(s)
}

// parseHop parses "addr", "addr:port" or "[addr]:port" and normalises the
// result: IPv4-mapped IPv6 becomes IPv4 and any zone is dropped.
func parseHop(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		host, _, splitErr := net.SplitHostPort(s)
		if splitErr != nil {
			return netip.Addr{}, false
		}
		if a, err = netip.ParseAddr(host); err != nil {
			return netip.Addr{}, false
		}
	}
	return a.Unmap().WithZone(""), true
}
