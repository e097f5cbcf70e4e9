// Package browsertest starts a headless Chromium for a test and drives it
// over the DevTools protocol with chromedp. Each [Browser] is one tab that
// records what a person at the screen would notice going wrong: the
// console's errors (console.error, uncaught exceptions, and the browser's
// own error entries, such as a resource the page could not load or a
// script the Content-Security-Policy refused) and every JavaScript dialog
// (alert, confirm, prompt), which it dismisses so that the page goes on.
//
// Chromium is Debian's chromium package (/usr/bin/chromium), found on PATH.
// Without it the test is skipped with a message, or fails when
// GINLIMIT_REQUIRE_REDIS=1 (redistest.RequireEnv), the switch that makes
// every test that needs an outside program required, as in CI.
//
// The browser starts with a fresh profile in the test's temporary directory
// and with everything that would call out switched off, since the machine's
// network is closed and a test must not depend on it.
package browsertest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/ginlimit/ginlimit/internal/redistest"
)

// ExecName is the name of the Chromium binary looked up on PATH: Debian's
// chromium package installs /usr/bin/chromium.
const ExecName = "chromium"

// CrossSiteHost is a host name the browser resolves to 127.0.0.1, so that a
// page served on loopback can also be reached from another site than
// 127.0.0.1 (for cross-site request tests).
const CrossSiteHost = "cross-site.test"

// ActionTimeout bounds each [Browser.Do] and [Run]. It is generous: on a
// loaded machine a page load can take seconds, and a test that waits for
// something must fail on its own deadline, not on this one.
const ActionTimeout = 60 * time.Second

// Browser is one tab of a headless Chromium owned by one test. Its methods
// are safe for concurrent use, but actions sent to one tab run one after
// another, as a person's clicks do.
type Browser struct {
	ctx context.Context // the tab's chromedp context

	mu       sync.Mutex
	problems []string // console errors, exceptions and browser log errors, in order
	dialogs  []string // the messages of the JavaScript dialogs that opened
}

// Start starts Chromium for t, opens a tab and registers their shutdown with
// t.Cleanup. It skips t, or fails it under GINLIMIT_REQUIRE_REDIS=1, when
// Chromium is not installed.
func Start(t testing.TB) *Browser {
	t.Helper()
	bin, err := exec.LookPath(ExecName)
	if err != nil {
		if os.Getenv(redistest.RequireEnv) == "1" {
			t.Fatalf("%s is not on PATH and %s=1: install it (apt-get install -y chromium)", ExecName, redistest.RequireEnv)
		}
		t.Skipf("%s is not on PATH; skipping the browser test (install it with apt-get install -y chromium, or set %s=1 to fail instead)", ExecName, redistest.RequireEnv)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP "+CrossSiteHost+" 127.0.0.1"),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()), opts...)
	t.Cleanup(allocCancel) // kills Chromium and waits for it
	browserCtx, browserCancel := chromedp.NewContext(allocCtx)
	t.Cleanup(browserCancel)
	// The first action starts the browser; it is bounded by the allocator's
	// own wait for the DevTools connection, never by a deadline here, which
	// would stop the browser when it passed.
	if err := chromedp.Do(browserCtx); err != nil {
		t.Fatalf("browsertest: start %s: %v", bin, err)
	}
	return open(t, browserCtx)
}

// Tab opens another tab of b's browser, with records of its own, closed
// when t ends.
func (b *Browser) Tab(t testing.TB) *Browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("browsertest: open a tab: %v", err)
	}
	return open(t, ctx)
}

// open returns the Browser of the tab of ctx, which has run once, and
// starts recording its console and dialogs until t ends.
func open(t testing.TB, ctx context.Context) *Browser {
	b := &Browser{ctx: ctx}
	// Both subscribe when they return, so nothing after this is missed.
	console := chromedp.Console(ctx)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.record(&b.problems, m.String()+" ("+m.URL+")")
			}
		}
	})
	wg.Go(func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.record(&b.dialogs, string(ev.Type)+": "+ev.Message)
			// A dialog blocks the page until it is answered.
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	})
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx) // closes the tab; the loops above end with it
		wg.Wait()
	})
	return b
}

func (b *Browser) record(list *[]string, s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*list = append(*list, s)
}

// Problems returns the console errors, uncaught exceptions and browser log
// errors of the tab so far, in order.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.problems)
}

// Dialogs returns the type and message of each JavaScript dialog that
// opened in the tab so far, in order.
func (b *Browser) Dialogs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.dialogs)
}

// Context returns the tab's chromedp context, for chromedp calls the
// helpers here do not cover. Bound each call with a deadline of its own.
func (b *Browser) Context() context.Context { return b.ctx }

// Do runs steps in the tab, in order, within [ActionTimeout], and fails t
// with the first error.
func (b *Browser) Do(t testing.TB, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, ActionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browsertest: %v", describe(err))
	}
}

// Run runs a in b's tab within [ActionTimeout] and returns its value; it
// fails t on error.
func Run[T any](t testing.TB, b *Browser, a chromedp.Action[T]) T {
	t.Helper()
	v, err := Try(b, a)
	if err != nil {
		t.Fatalf("browsertest: %v", describe(err))
	}
	return v
}

// Try runs a in b's tab within [ActionTimeout] and returns its value and
// error, for a test that polls the page while it may be loading another.
func Try[T any](b *Browser, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, ActionTimeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Response runs steps that start a navigation, such as a click on a
// link or a form's submit button, within [ActionTimeout], and returns the
// response of the document that loads (after redirects); it fails t on
// error, and when no navigation comes.
func (b *Browser) Response(t testing.TB, steps ...chromedp.Action[chromedp.Void]) *network.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, ActionTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	if err != nil {
		t.Fatalf("browsertest: %v", describe(err))
	}
	return resp
}

// describe adds to a timeout the hint of what usually causes it.
func describe(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.Join(err, errors.New("(the element or event waited for never came within browsertest.ActionTimeout)"))
	}
	return err
}
