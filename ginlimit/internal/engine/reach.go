package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// answers returns nil when the node's server answers a PING within the
// Timeout of a call that started at start and ended at ctx's deadline,
// and otherwise why it does not. A call that ran out of its Timeout while
// no other call of the node was answered is taken for a Redis that does
// not answer; but when this process is not given the CPU for longer than
// the Timeout (busy loops on a small machine do that), every call in
// flight runs out of its Timeout together, their replies unread in the
// socket (Go reports a socket deadline that has passed before it reads
// what has arrived), and none is answered. The PING tells the two apart.
// The server is dialed meanwhile, as go-redis's pool would, but once, so
// that a PING that gets no answer has a cause: a refused connection, say,
// where go-redis, still retrying its dial, reports only that the time ran
// out. The verdict is the PING's alone. A Redis that hangs answers
// neither: each
// decision that finds it so (until the breaker opens, then its probes)
// waits up to twice the Timeout.
func (n *node) answers(ctx context.Context, start time.Time) error {
	if n.pool == nil {
		return errNoPing
	}
	d, ok := ctx.Deadline()
	if !ok {
		return errNoPing
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.Sub(start))
	defer cancel()
	dialed := make(chan error, 1)
	go func() { dialed <- n.dialOnce(pctx) }()
	_, err := bounded(pctx, func() (string, error) { return n.pool.Ping(pctx).Result() })
	if err == nil {
		return nil
	}
	if derr := <-dialed; derr != nil {
		return derr // refused, say: why the PING got no answer
	}
	return err
}

// dialOnce dials the node's server once, as go-redis's pool does, and
// closes the connection: nil when it connects, the dial's error when it
// does not, or ctx's cause when ctx ends first (a connection made later is
// closed then).
func (n *node) dialOnce(ctx context.Context) error {
	opt := n.pool.Options()
	done := make(chan net.Conn, 1)
	errc := make(chan error, 1)
	// In a goroutine, since a Dialer need not honour ctx (see reach).
	go func() {
		c, err := opt.Dialer(ctx, opt.Network, opt.Addr)
		if err != nil {
			errc <- err
			return
		}
		done <- c
	}()
	select {
	case c := <-done:
		_ = c.Close()
		return nil
	case err := <-errc:
		return err
	case <-ctx.Done():
		go func() {
			select {
			case c := <-done:
				_ = c.Close()
			case <-errc:
			}
		}()
		return context.Cause(ctx)
	}
}

// errNoPing is why answers cannot tell: a node of a client the engine does
// not know, or a call without a deadline.
var errNoPing = errors.New("no PING could be sent")

// deadlineOf returns ctx's cause for err, a call's error, when err is a
// socket timeout at ctx's deadline, and err otherwise. go-redis sets the
// socket's deadline to the context's, and the socket's timer may fire
// before the context's: the caller then learns why the call ended (the
// request's own deadline, or the Timeout) from ctx, which ends now.
func deadlineOf(ctx context.Context, err error) error {
	if !isNetTimeout(err) {
		return err
	}
	if d, ok := ctx.Deadline(); !ok || time.Now().Before(d) {
		return err
	}
	<-ctx.Done()
	return cause(ctx)
}

// reach returns nil when the node may be called: it is not down, or a
// dial to its server connects now (the connection is closed at once).
// Otherwise it returns the dial's error, or ctx's cause when ctx ends
// first. A node of a client the engine does not know is never dialed.
func (n *node) reach(ctx context.Context) error {
	if !n.down.Load() || n.pool == nil {
		return nil
	}
	select {
	case n.dialing <- struct{}{}:
	case <-ctx.Done():
		// Waiting for another call's dial is time in this process: the
		// dial that call makes gives the verdict on Redis.
		return fmt.Errorf("%w: waiting for another call's dial: %w", ErrSaturated, cause(ctx))
	}
	defer func() { <-n.dialing }()
	if !n.down.Load() {
		return nil // the dial of a call that waited before this one connected
	}
	opt := n.pool.Options()
	type dialed struct {
		conn net.Conn
		err  error
	}
	// In a goroutine, since a Dialer need not honour ctx (go-redis's own,
	// with TLS, is bounded by DialTimeout only).
	done := make(chan dialed, 1)
	go func() {
		c, err := opt.Dialer(ctx, opt.Network, opt.Addr)
		done <- dialed{c, err}
	}()
	select {
	case d := <-done:
		if d.err != nil {
			if ctx.Err() != nil {
				return cause(ctx)
			}
			return d.err
		}
		_ = d.conn.Close()
		n.down.Store(false)
		return nil
	case <-ctx.Done():
		go func() {
			if d := <-done; d.conn != nil {
				_ = d.conn.Close()
			}
		}()
		return cause(ctx)
	}
}

// connFailure reports whether err, a call's error, is the server's
// connection or time failing, rather than a reply of Redis (or a reply
// the engine could not read).
func connFailure(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded)
}

// broken reports whether err says that a connection which was open broke:
// the server reset or closed it, as opposed to a dial that failed or a
// reply that did not come in time.
func broken(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// poolBusy reports whether every connection of c's pool (the pool that
// serves the call's key: a plain client's, a cluster master's or a Ring
// shard's) is in use; false for a nil c. A bare deadline error can mean a
// wait for a connection or go-redis backing off between retries on a dead
// Redis; only the first leaves the pool full of busy connections.
func poolBusy(c *redis.Client) bool {
	if c == nil {
		return false
	}
	st := c.PoolStats()
	return st.TotalConns > st.IdleConns && int(st.TotalConns-st.IdleConns) >= c.Options().PoolSize
}

// isNetTimeout reports whether err is a timeout of a network operation (a
// socket deadline), as opposed to a context's deadline, which implements
// net.Error too.
func isNetTimeout(err error) bool {
	var ne net.Error
	return !errors.Is(err, context.DeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}
