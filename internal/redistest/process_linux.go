package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the server if the test binary dies before its
// cleanup runs, so no redis-server outlives a crashed test.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// reserve holds the loopback port while its server is stopped: a socket
// bound to it but not listening, so that a connection is refused, as by a
// stopped server, and no other test's server can take the port meanwhile
// (a client of the stopped server would then meet a live Redis). It binds
// without SO_REUSEADDR, which is what keeps a server from binding too; so
// it fails while a connection the killed server closed is in TIME_WAIT,
// and the port is then left unheld (release is a no-op).
func reserve(port int) (release func()) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return func() {}
	}
	return func() { _ = syscall.Close(fd) }
}
