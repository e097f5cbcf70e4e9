package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// cpuSample is a reading of the CPU time, in clock ticks, that the machine,
// this process and redis-server have used. The machine is shared, so the
// report shows how much CPU other processes took while a case ran: the
// client and the server compete with them for the same cores.
type cpuSample struct {
	busy, total, self, redis int64
	ncpu                     int // the CPUs that /proc/stat's total counts
	ok                       bool
}

// cpuUse is the CPU used between two samples, in percent of one core
// (100 is one core busy for the whole interval).
type cpuUse struct {
	Client, Redis, Others float64
	ok                    bool
}

// readCPU reads /proc (Linux only); elsewhere it returns a sample with ok
// false.
func readCPU(redisPID int) cpuSample {
	var s cpuSample
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, rest, _ := strings.Cut(string(data), "\n")
	for _, l := range strings.Split(rest, "\n") {
		if len(l) > 3 && strings.HasPrefix(l, "cpu") && l[3] >= '0' && l[3] <= '9' {
			s.ncpu++
		}
	}
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return s
	}
	// user nice system idle iowait irq softirq steal
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return s
		}
		s.total += v
		if i != 4 && i != 5 {
			s.busy += v
		}
	}
	var ok1, ok2 bool
	s.self, ok1 = procTicks("/proc/self/stat")
	s.redis, ok2 = procTicks(fmt.Sprintf("/proc/%d/stat", redisPID))
	s.ok = ok1 && ok2 && s.ncpu > 0
	return s
}

// procTicks returns utime+stime of a /proc/PID/stat file.
func procTicks(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	// After the name: state(3) ... utime(14) stime(15), so indexes 11 and 12.
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	return u + st, err1 == nil && err2 == nil
}

// cpuTicks is the CPU time used over an interval, or over several added up.
type cpuTicks struct {
	busy, total, self, redis int64
	ncpu                     int
	ok, bad                  bool
}

// since returns the ticks used from a to b.
func (b cpuSample) since(a cpuSample) cpuTicks {
	if !a.ok || !b.ok || b.total <= a.total {
		return cpuTicks{}
	}
	return cpuTicks{busy: b.busy - a.busy, total: b.total - a.total, self: b.self - a.self, redis: b.redis - a.redis, ncpu: b.ncpu, ok: true}
}

// add sums two intervals. The zero cpuTicks is an empty sum; once an
// unreadable interval is added, the sum stays unreadable.
func (t cpuTicks) add(u cpuTicks) cpuTicks {
	if !u.ok || t.bad {
		return cpuTicks{bad: true}
	}
	return cpuTicks{busy: t.busy + u.busy, total: t.total + u.total, self: t.self + u.self, redis: t.redis + u.redis, ncpu: u.ncpu, ok: true}
}

// use converts ticks to percent of one core.
func (t cpuTicks) use() cpuUse {
	if !t.ok || t.total <= 0 || t.ncpu <= 0 {
		return cpuUse{}
	}
	core := float64(t.total) / float64(t.ncpu) // the ticks of one core
	self, redis := float64(t.self), float64(t.redis)
	others := float64(t.busy) - self - redis
	return cpuUse{Client: 100 * self / core, Redis: 100 * redis / core, Others: max(0, 100*others/core), ok: true}
}

func (u cpuUse) String() string {
	if !u.ok {
		return "–"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f", u.Client, u.Redis, u.Others)
}
