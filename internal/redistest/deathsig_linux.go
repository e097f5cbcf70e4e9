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
