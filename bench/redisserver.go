package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server process that this program started on a
// free loopback port and owns: it has no persistence, holds nothing but
// benchmark keys, and is killed by stop. The harness never talks to any other
// Redis (in particular never to :6379), which is what makes FLUSHDB and
// CONFIG RESETSTAT between cases safe.
type redisServer struct {
	// Addr is the server's 127.0.0.1:port.
	Addr string
	// Version is the server's redis_version, as INFO reports it.
	Version string
	// Pid is the server's process id.
	Pid int

	dir      string
	stopOnce sync.Once
	cmd      *exec.Cmd
	exited   chan struct{}
	stderr   *bytes.Buffer
}

// startRedis starts bin (a path or a name on PATH) on a free loopback port
// and waits until it answers PING. It tries a few ports, in case another
// process takes the chosen one between choosing and binding.
func startRedis(bin string) (*redisServer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (%w): install it with apt-get install -y redis-server, or pass -redis-server PATH", err)
	}
	dir, err := os.MkdirTemp("", "ginlimit-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("redis-server: temporary directory: %w", err)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &redisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
		if lastErr = s.start(path, port); lastErr == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redis-server: could not start: %w", lastErr)
}

// freePort asks the kernel for a free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *redisServer) start(path string, port int) error {
	cmd := exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning")
	s.stderr = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited at start: %s", port, bytes.TrimSpace(s.stderr.Bytes()))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		if err == nil {
			var info map[string]string
			info, err = infoSection(ctx, c, "server")
			if err == nil {
				s.Version = info["redis_version"]
			}
		}
		cancel()
		if err == nil {
			s.cmd, s.exited, s.Pid = cmd, exited, cmd.Process.Pid
			return nil
		}
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s", port)
}

// stop kills the server, waits for it and removes its directory. It is safe
// to call more than once and from more than one goroutine (the interrupt
// handler and main's defer).
func (s *redisServer) stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		_ = os.RemoveAll(s.dir)
	})
}

// alive reports whether the server process is still running.
func (s *redisServer) alive() error {
	select {
	case <-s.exited:
		return errors.New("redis-server exited: " + string(bytes.TrimSpace(s.stderr.Bytes())))
	default:
		return nil
	}
}
