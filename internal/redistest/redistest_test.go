package redistest

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestStoppedServerKeepsItsPort: while a server is stopped, its port
// refuses connections, and no other server can listen on it (on Linux,
// where it is held): a test's "down" Redis must not turn into another
// test's live one. Restart gets the port back.
func TestStoppedServerKeepsItsPort(t *testing.T) {
	s := Start(t)
	s.Stop()
	if c, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a stopped server's port accepted a connection")
	}
	if runtime.GOOS == "linux" {
		if l, err := net.Listen("tcp", s.Addr); err == nil {
			l.Close()
			t.Fatal("another listener took a stopped server's port")
		}
	}
	s.Restart()
	if err := s.Client().Ping(context.Background()).Err(); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}
