package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// infoSection runs INFO section and returns its field: value lines.
func infoSection(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	Calls int64
	Usec  int64
}

// cmdStats maps a lower-case command name ("evalsha", "config|resetstat")
// to its counters.
type cmdStats map[string]cmdStat

// readCmdStats parses INFO commandstats, whose lines read
// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0,failed_calls=0
func readCmdStats(ctx context.Context, c *redis.Client) (cmdStats, error) {
	info, err := infoSection(ctx, c, "commandstats")
	if err != nil {
		return nil, err
	}
	stats := make(cmdStats, len(info))
	for k, v := range info {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st cmdStat
		for _, field := range strings.Split(v, ",") {
			f, val, _ := strings.Cut(field, "=")
			switch f {
			case "calls":
				st.Calls, err = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.Usec, err = strconv.ParseInt(val, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats: %s: %q: %w", k, field, err)
			}
		}
		stats[name] = st
	}
	return stats, nil
}

// adminCommand reports whether name is one that the harness itself sends
// around a measurement (not part of any decision).
func adminCommand(name string) bool {
	return name == "info" || strings.HasPrefix(name, "config") || name == "flushdb"
}

// topLevel are the commands that a client sends for a decision. Commands run
// from inside a script (ZADD, GET, TIME, ...) are counted in commandstats too,
// but their time is already inside the EVALSHA's, so summing every line would
// count it twice.
var topLevel = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "ping", "multi", "exec"}

// scriptCalls is the number of script invocations (EVALSHA and EVAL).
func (s cmdStats) scriptCalls() int64 {
	return s["evalsha"].Calls + s["eval"].Calls + s["evalsha_ro"].Calls + s["eval_ro"].Calls
}

// topLevelTotal sums calls and µs over the commands in topLevel.
func (s cmdStats) topLevelTotal() cmdStat {
	var t cmdStat
	for _, name := range topLevel {
		t.Calls += s[name].Calls
		t.Usec += s[name].Usec
	}
	return t
}

// inner returns the commands that are neither top level nor the harness's
// own: what the scripts ran inside Redis.
func (s cmdStats) inner() cmdStats {
	m := make(cmdStats)
	for name, st := range s {
		if !adminCommand(name) && !isTopLevel(name) {
			m[name] = st
		}
	}
	return m
}

func isTopLevel(name string) bool {
	for _, t := range topLevel {
		if name == t {
			return true
		}
	}
	return false
}
