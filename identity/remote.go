package identity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// Defaults of [RemoteJWKS], and the bounds of its retries and responses.
const (
	defaultRefreshInterval   = time.Hour
	defaultUnknownKIDRefetch = 5 * time.Second
	defaultStartupTimeout    = 5 * time.Second
	defaultFetchTimeout      = 10 * time.Second

	// firstRetry and maxRetry bound the back-off after a failed fetch:
	// 1 s, 2 s, 4 s ... up to a minute (and never beyond the refresh
	// interval), so a provider that was down at boot is asked again soon.
	firstRetry = time.Second
	maxRetry   = time.Minute

	// maxJWKSBytes bounds a JWKS response: real sets are a few KiB, and a
	// broken or hostile endpoint must not make the fetcher buffer without
	// bound.
	maxJWKSBytes = 1 << 20
)

// RemoteJWKSOption configures [RemoteJWKS]. Only RemoteJWKS accepts one, so
// a refresh interval cannot be given to a verifier that fetches nothing.
type RemoteJWKSOption interface {
	applyRemote(*remoteConfig) error
}

type remoteOptionFunc func(*remoteConfig) error

func (f remoteOptionFunc) applyRemote(c *remoteConfig) error { return f(c) }

type remoteConfig struct {
	ctx        context.Context
	url        string // as given: it is fetched
	redacted   string // for errors and logs: without a password
	refresh    time.Duration
	unknownKID time.Duration
	startup    time.Duration
	fetch      time.Duration
	client     *http.Client
	log        *slog.Logger
	require    bool
	allowHTTP  bool
}

// RemoteJWKS verifies tokens with the JSON Web Key Set published at rawURL
// by an identity provider, fetched with github.com/MicahParks/jwkset and
// kept up to date in the background. Keys are vetted and chosen by kid as
// those of [JWKS] are (except that an EC key on a curve other than P-256,
// P-384 or P-521 is skipped, where JWKS refuses the set).
//
// [NewJWT] waits for the first fetch at most [StartupTimeout] (5 s) and
// until ctx is done. If it fails, tokens that need the set get
// [ErrUnauthenticated] while the fetch is retried (1 s, 2 s, 4 s ... at
// most a minute apart), unless [RequireStartupFetch] is given. The set is
// fetched again every [RefreshInterval] (1 h), and for a kid it lacks at
// most every [UnknownKIDRefetch] (5 s). A failed fetch keeps the last good
// set; a good one replaces it whole. The fetcher stops when ctx is done or
// at [JWT.Close]. rawURL must be https or http to a loopback host
// ([AllowHTTP] lifts that); logs never name a token, a claim or a kid.
func RemoteJWKS(ctx context.Context, rawURL string, opts ...RemoteJWKSOption) JWTOption {
	return jwtOptionFunc(func(c *jwtConfig) error {
		if c.remote != nil {
			return errors.New("identity: RemoteJWKS: given twice")
		}
		if ctx == nil {
			return errors.New("identity: RemoteJWKS: nil context")
		}
		rc := &remoteConfig{
			ctx:        ctx,
			url:        rawURL,
			refresh:    defaultRefreshInterval,
			unknownKID: defaultUnknownKIDRefetch,
			startup:    defaultStartupTimeout,
			fetch:      defaultFetchTimeout,
		}
		for _, o := range opts {
			if err := o.applyRemote(rc); err != nil {
				return err
			}
		}
		u, err := url.Parse(rawURL)
		if err != nil {
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // without the URL, which may hold a password
			}
			return fmt.Errorf("identity: RemoteJWKS: bad URL: %w", err)
		}
		if u.Host == "" {
			return errors.New("identity: RemoteJWKS: the URL has no host")
		}
		if err := checkScheme(u, rc.allowHTTP); err != nil {
			return fmt.Errorf("identity: RemoteJWKS: %w", err)
		}
		rc.redacted = u.Redacted()
		if rc.log == nil {
			rc.log = slog.Default()
		}
		c.remote = rc
		return nil
	})
}

// checkScheme refuses a URL the set may not be fetched from: anything but
// https, save http to a loopback host or with AllowHTTP.
func checkScheme(u *url.URL, allowHTTP bool) error {
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && (allowHTTP || isLoopback(u.Hostname())):
	case u.Scheme == "http":
		return fmt.Errorf("%s: plain http to a non-loopback host lets anyone on the path replace the keys; use https, or AllowHTTP", u.Redacted())
	default:
		return fmt.Errorf("%s: scheme %q, want https", u.Redacted(), u.Scheme)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("identity: %s(%v): want a positive duration", name, d)
	}
	return nil
}

// RefreshInterval sets how often [RemoteJWKS] fetches the set when nothing
// asks for it sooner. The default is 1 hour.
func RefreshInterval(d time.Duration) RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		c.refresh = d
		return positive("RefreshInterval", d)
	})
}

// UnknownKIDRefetch sets the least time between two fetches asked for by
// tokens whose kid the set lacks (or by any token while there is no set).
// The default is 5 seconds, so a key added to the provider's set is
// accepted within about 5 s of its first use (plus the fetch itself).
func UnknownKIDRefetch(d time.Duration) RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		c.unknownKID = d
		return positive("UnknownKIDRefetch", d)
	})
}

// StartupTimeout bounds the first fetch, which [NewJWT] waits for. The
// default is 5 seconds. See [RemoteJWKS] for what happens when it fails.
func StartupTimeout(d time.Duration) RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		c.startup = d
		return positive("StartupTimeout", d)
	})
}

// FetchTimeout bounds each background fetch, from the request to the last
// byte of the response. The default is 10 seconds.
func FetchTimeout(d time.Duration) RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		c.fetch = d
		return positive("FetchTimeout", d)
	})
}

// HTTPClient sets the client the set is fetched with, for a proxy, custom
// roots or a client certificate. It is not modified (a copy is used), and
// its Timeout and CheckRedirect, if any, apply. By default a client of its
// own is used, which follows a redirect only where rawURL itself could
// point, and whose idle connections are closed when the fetcher stops.
func HTTPClient(client *http.Client) RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		if client == nil {
			return errors.New("identity: HTTPClient: nil client")
		}
		c.client = client
		return nil
	})
}

// JWKSLogger sets where failed fetches are logged (at Warn) and recoveries
// (at Info). The default is slog.Default() as it is when [NewJWT] runs.
func JWKSLogger(l *slog.Logger) RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		if l == nil {
			return errors.New("identity: JWKSLogger: nil logger")
		}
		c.log = l
		return nil
	})
}

// RequireStartupFetch makes [NewJWT] fail when the first fetch does not
// bring a good set within [StartupTimeout], instead of starting with no set
// and retrying in the background.
func RequireStartupFetch() RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		c.require = true
		return nil
	})
}

// AllowHTTP lets [RemoteJWKS] fetch over plain http from any host, for a
// provider reached over a network that is trusted (a service mesh that
// encrypts, say). Whoever can change the response can mint tokens.
func AllowHTTP() RemoteJWKSOption {
	return remoteOptionFunc(func(c *remoteConfig) error {
		c.allowHTTP = true
		return nil
	})
}

// remoteJWKS is the background fetcher of one verifier: a single goroutine
// (run) does every fetch after the first, so fetches never overlap and
// requests never wait on the network.
type remoteJWKS struct {
	cfg       *remoteConfig
	client    *http.Client
	idle      func() // closes the idle connections of a transport of our own
	store     func(jwks)
	kick      chan struct{} // a token wants a new set; capacity 1
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// startRemote makes the first fetch, bounded by the start-up timeout, and
// starts the background fetcher (unless the first fetch failed and the
// configuration requires it, in which case nothing is left running).
func startRemote(cfg *remoteConfig, store func(jwks)) (*remoteJWKS, error) {
	r := &remoteJWKS{cfg: cfg, store: store, kick: make(chan struct{}, 1), done: make(chan struct{})}
	base := cfg.client
	if base == nil {
		tr, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			tr = tr.Clone()
		} else {
			tr = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		base = &http.Client{
			Transport: tr,
			// A redirect may not lead where the URL itself could not.
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				if len(via) >= 10 {
					return errors.New("stopped after 10 redirects")
				}
				return checkScheme(req.URL, cfg.allowHTTP)
			},
		}
		r.idle = tr.CloseIdleConnections
	}
	client := *base
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	client.Transport = limitedTransport{base: rt}
	r.client = &client

	ctx, cancel := context.WithCancel(cfg.ctx)
	r.cancel = cancel
	first, stop := context.WithTimeout(ctx, cfg.startup)
	set, err := r.fetch(first, cfg.startup)
	stop()
	if err != nil {
		if cfg.require {
			cancel()
			r.closeIdle()
			return nil, fmt.Errorf("identity: RemoteJWKS: the start-up fetch brought no key set: %w", err)
		}
		cfg.log.LogAttrs(ctx, slog.LevelWarn, "identity: JWKS not fetched at start-up; tokens that need it get 401 until a fetch succeeds",
			slog.String("url", cfg.redacted), slog.Any("error", err), slog.Duration("retry_in", r.retryAfter(1)))
	} else {
		store(set)
	}
	go r.run(ctx, err == nil)
	return r, nil
}

// fetch gets and vets the set: one request made by jwkset (its storage
// constructor without a refresh interval fetches once and starts no
// goroutine), handed to vettingStorage, which applies newJWKS.
func (r *remoteJWKS) fetch(ctx context.Context, timeout time.Duration) (jwks, error) {
	st := &vettingStorage{MemoryJWKSet: jwkset.NewMemoryStorage()}
	_, err := jwkset.NewStorageFromHTTP(r.cfg.url, jwkset.HTTPClientStorageOptions{
		Client:      r.client,
		Ctx:         ctx,
		HTTPTimeout: timeout,
		Storage:     st,
	})
	if err != nil {
		return nil, fmt.Errorf("identity: RemoteJWKS %s: %w", r.cfg.redacted, err)
	}
	return st.set, nil
}

// retryAfter is the wait after the n-th failure in a row.
func (r *remoteJWKS) retryAfter(n int) time.Duration {
	d := maxRetry
	if n < 8 {
		d = min(firstRetry<<(n-1), maxRetry)
	}
	return min(d, r.cfg.refresh)
}

// run is the background fetcher. It fetches when the refresh (or retry)
// timer fires, or when a token asked for a set and UnknownKIDRefetch has
// passed since the last fetch began, whichever comes first.
func (r *remoteJWKS) run(ctx context.Context, loaded bool) {
	defer close(r.done)
	defer r.closeIdle()
	last := time.Now()
	failures := 0
	if !loaded {
		failures = 1
	}
	next := r.cfg.refresh
	if failures > 0 {
		next = r.retryAfter(failures)
	}
	refresh := time.NewTimer(next)
	defer refresh.Stop()
	asked := time.NewTimer(time.Hour)
	asked.Stop()
	defer asked.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			if !pending {
				pending = true
				asked.Reset(max(0, time.Until(last.Add(r.cfg.unknownKID))))
			}
			continue
		case <-refresh.C:
		case <-asked.C:
		}
		pending = false
		asked.Stop()
		last = time.Now()
		set, err := r.fetch(ctx, r.cfg.fetch)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			next = r.retryAfter(failures)
			msg := "identity: JWKS fetch failed; the last good set stays in force"
			if !loaded {
				msg = "identity: JWKS fetch failed; still no key set, tokens that need it get 401"
			}
			r.cfg.log.LogAttrs(ctx, slog.LevelWarn, msg,
				slog.String("url", r.cfg.redacted), slog.Any("error", err), slog.Duration("retry_in", next))
		} else {
			r.store(set)
			level := slog.LevelDebug
			if failures > 0 {
				level = slog.LevelInfo
			}
			r.cfg.log.LogAttrs(ctx, level, "identity: JWKS fetched",
				slog.String("url", r.cfg.redacted), slog.Int("keys", len(set)))
			failures, loaded, next = 0, true, r.cfg.refresh
		}
		refresh.Reset(next)
	}
}

// want asks the fetcher for a new set without waiting: the request is
// answered from the set in force, and many asks before the next fetch are
// one.
func (r *remoteJWKS) want() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// wants reports whether a token the set has no key for should ask for a
// new set: only asymmetric algorithms can be in a JWKS we use.
func wants(t *jwt.Token) bool {
	switch t.Method.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS, *jwt.SigningMethodECDSA, *jwt.SigningMethodEd25519:
		return true
	}
	return false
}

func (r *remoteJWKS) close() {
	r.closeOnce.Do(func() {
		r.cancel()
		<-r.done // run closes the idle connections as it ends
	})
}

func (r *remoteJWKS) closeIdle() {
	if r.idle != nil {
		r.idle()
	}
}

// vettingStorage is the jwkset storage a fetch writes into. jwkset has
// parsed the response into keys (skipping kinds it does not support);
// KeyReplaceAll hands them to newJWKS, the one place keys are vetted, and
// refuses the whole set if it does, which fails the fetch so the set in
// force stays.
type vettingStorage struct {
	*jwkset.MemoryJWKSet
	set jwks
}

var _ jwkset.Storage = (*vettingStorage)(nil)

func (s *vettingStorage) KeyReplaceAll(ctx context.Context, given []jwkset.JWK) error {
	keys := make([]jwk, len(given))
	for i, g := range given {
		m := g.Marshal()
		keys[i] = jwk{
			Kty: string(m.KTY), Kid: m.KID, Use: string(m.USE), Alg: string(m.ALG),
			N: m.N, E: m.E, Crv: string(m.CRV), X: m.X, Y: m.Y,
		}
	}
	set, err := newJWKS(keys)
	if err != nil {
		return err
	}
	s.set = set
	return s.MemoryJWKSet.KeyReplaceAll(ctx, given)
}

// limitedTransport refuses a response body of maxJWKSBytes or more.
type limitedTransport struct{ base http.RoundTripper }

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: maxJWKSBytes}
	return resp, nil
}

type limitedBody struct {
	io.ReadCloser
	left int
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("identity: RemoteJWKS: response of %d bytes or more", maxJWKSBytes)
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= n
	return n, err
}
