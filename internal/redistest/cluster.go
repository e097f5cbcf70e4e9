package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterTimeout bounds each step of a cluster's start-up: creating it with
// redis-cli, and waiting until every node agrees it is up. Generous, for a
// loaded CI machine; the whole start-up usually takes 2.2 to 2.4 seconds.
const clusterTimeout = 20 * time.Second

// Cluster is a Redis Cluster of three masters and no replicas, owned by one
// test: three redis-server processes on free loopback ports, joined with
// redis-cli --cluster create, stopped when the test ends.
//
// The nodes run with cluster-require-full-coverage no, so that when one
// master is stopped the other two keep serving their own slots. With the
// default (yes), a cluster without replicas answers CLUSTERDOWN to every
// command once a master is marked failed, and a test could not tell a
// client that isolates the failure from one that does not.
//
// Node i is Addrs()[i]. Its methods are safe for concurrent use, except
// StopMaster, which a test should call from one goroutine.
type Cluster struct {
	t     testing.TB
	nodes []*Server
	bus   []int    // node i's cluster bus port
	ids   []string // node i's cluster node id
	// owner maps each hash slot to the index of the master serving it, as
	// every node reported when the cluster came up. Slots never move: the
	// cluster has no replicas and nothing resharded it.
	owner [clusterSlots]int8

	mu      sync.Mutex
	stopped []bool
}

// StartCluster starts a three-master Redis Cluster for t and registers its
// shutdown with t.Cleanup. It returns once every node reports
// cluster_state:ok, every node reports the same slot map, and a
// ClusterClient has written through each master.
//
// That takes a little over two seconds: a master that starts reports
// cluster_state:ok no sooner than two seconds after it started (Redis's
// CLUSTER_WRITABLE_DELAY), and redis-cli usually finishes within that time.
// Each step waits up to 20 s on a loaded machine, and a failed start is
// retried twice with new ports.
//
// It needs redis-server and redis-cli on PATH. Without them the test is
// skipped, or fails if GINLIMIT_REQUIRE_REDIS=1.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	server := lookBinary(t, "redis-server")
	cli := lookBinary(t, "redis-cli")
	start := time.Now()
	var lastErr error
	// A whole new cluster per attempt: a port taken between choosing and
	// binding it, or a create that went wrong half-way, leaves nothing
	// worth reusing.
	for attempt := 1; attempt <= 3; attempt++ {
		c, err := startCluster(t, server, cli)
		if err == nil {
			t.Logf("redistest: cluster %s up in %v", strings.Join(c.Addrs(), " "), time.Since(start).Round(time.Millisecond))
			return c
		}
		lastErr = fmt.Errorf("attempt %d: %w", attempt, err)
		t.Logf("redistest: %v", lastErr)
	}
	t.Fatalf("redistest: could not start a Redis Cluster: %v", lastErr)
	return nil
}

// lookBinary finds name on PATH, or skips t (fails it when RequireEnv=1),
// as Start does for redis-server.
func lookBinary(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s is not on PATH and %s=1: install it (apt-get install -y redis-server, which brings redis-cli too)", name, RequireEnv)
		}
		t.Skipf("%s is not on PATH; skipping the Redis Cluster test (install it with apt-get install -y redis-server, or set %s=1 to fail instead)", name, RequireEnv)
	}
	return bin
}

// startCluster makes one attempt at starting the three nodes, creating the
// cluster and waiting until it serves. On an error every node it started
// is stopped again.
func startCluster(t testing.TB, server, cli string) (_ *Cluster, err error) {
	dir := t.TempDir()
	c := &Cluster{t: t, stopped: make([]bool, 3)}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, c.logTails())
			for _, s := range c.nodes {
				s.close()
			}
		}
	}()
	used := map[int]bool{}
	for range 3 {
		s, bus, err := startNode(t, server, dir, used)
		if err != nil {
			return nil, err
		}
		c.nodes, c.bus = append(c.nodes, s), append(c.bus, bus)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	setDeathSignal(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-cli: %w", err)
	}
	meshCtx, cancelMesh := context.WithCancel(ctx)
	meshed := make(chan struct{})
	go func() { defer close(meshed); c.mesh(meshCtx) }()
	err = cmd.Wait()
	cancelMesh()
	<-meshed
	if err != nil {
		return nil, fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// mesh speeds up redis-cli --cluster create. redis-cli has every node meet
// the first one, and the others then learn of each other by gossip, which
// with a 2 s node timeout takes from one to several seconds, while
// redis-cli polls once a second for all nodes to agree. Once every node
// knows the first (so redis-cli has assigned the slots and sent its
// MEETs), mesh has each pair of the other nodes meet directly. It is best
// effort: a MEET of a known node is harmless, and gossip gets there anyway.
func (c *Cluster) mesh(ctx context.Context) {
	admins := make([]*redis.Client, len(c.nodes))
	for i, s := range c.nodes {
		admins[i] = redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
		defer admins[i].Close()
	}
	for i := 1; i < len(admins); i++ {
		for {
			info, err := admins[i].ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_known_nodes:1\r\n") {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	for i := 1; i < len(admins); i++ {
		for j := i + 1; j < len(admins); j++ {
			_ = admins[i].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.nodes[j].port, c.bus[j]).Err()
		}
	}
}

// startNode starts one cluster-enabled redis-server on a free port, with its
// cluster bus on another free port (cluster-port: the default, port+10000,
// may be taken or beyond 65535).
func startNode(t testing.TB, bin, dir string, used map[int]bool) (*Server, int, error) {
	var lastErr error
	for range 5 {
		port, err1 := freePort()
		bus, err2 := freePort()
		if lastErr = errors.Join(err1, err2); lastErr != nil {
			continue
		}
		if port == bus || used[port] || used[bus] {
			lastErr = fmt.Errorf("ports %d and %d not distinct", port, bus)
			continue
		}
		s := &Server{t: t, bin: bin, port: port, dir: dir, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		if lastErr = s.startClusterNode(bus); lastErr == nil {
			used[port], used[bus] = true, true
			t.Cleanup(s.close)
			return s, bus, nil
		}
	}
	return nil, 0, fmt.Errorf("could not start a cluster node: %w", lastErr)
}

// startClusterNode is Server.start for a cluster node.
func (s *Server) startClusterNode(bus int) error {
	p := strconv.Itoa(s.port)
	return s.launch([]string{
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
		"--cluster-config-file", filepath.Join(s.dir, "nodes-"+p+".conf"),
		"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no",
	}, s.logFile())
}

func (s *Server) logFile() string {
	return filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".log")
}

// tail returns the end of a log file, for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return "\n" + path + ":\n" + string(b)
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	for _, s := range c.nodes {
		b.WriteString(tail(s.logFile()))
	}
	return b.String()
}

// waitReady waits until every node reports cluster_state:ok and the same
// slot map over our three masters, then until a ClusterClient reaches each
// master through its slots.
func (c *Cluster) waitReady(ctx context.Context) error {
	admins := make([]*redis.Client, len(c.nodes))
	for i, s := range c.nodes {
		admins[i] = redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
		defer admins[i].Close()
	}
	var lastErr error
	for {
		if lastErr = c.checkNodes(ctx, admins); lastErr == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ready after %v: %w", clusterTimeout, lastErr)
		case <-time.After(25 * time.Millisecond):
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: time.Second})
	defer cc.Close()
	for {
		if lastErr = c.checkRouting(ctx, cc, admins); lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster up, but a ClusterClient cannot use it after %v: %w", clusterTimeout, lastErr)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// checkNodes asks every node for its state, id and slot map, and fills in
// c.ids and c.owner when all agree.
func (c *Cluster) checkNodes(ctx context.Context, admins []*redis.Client) error {
	index := map[string]int{}
	for i, s := range c.nodes {
		index[s.Addr] = i
	}
	ids := make([]string, len(admins))
	var first [clusterSlots]int8
	for i, a := range admins {
		addr := c.nodes[i].Addr
		if err := checkClusterInfo(ctx, a, addr); err != nil {
			return err
		}
		var err error
		if ids[i], err = a.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", addr, err)
		}
		owner, err := c.slotMap(ctx, a, addr, index)
		if err != nil {
			return err
		}
		if i == 0 {
			first = owner
		} else if owner != first {
			return fmt.Errorf("%s and %s disagree on the slot map", c.nodes[0].Addr, addr)
		}
	}
	c.ids, c.owner = ids, first
	return nil
}

// checkClusterInfo checks that the node at addr, through a, sees a healthy
// cluster of three masters with every slot served.
func checkClusterInfo(ctx context.Context, a *redis.Client, addr string) error {
	info, err := a.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
	}
	for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:3", "cluster_size:3"} {
		if !strings.Contains(info, want+"\r\n") {
			return fmt.Errorf("%s: CLUSTER INFO lacks %s:\n%s", addr, want, info)
		}
	}
	return nil
}

// slotMap returns each slot's master, as its place in c.nodes (index maps
// an address to it), as the node at addr sees it through a, when every slot
// has a master and every master serves a slot.
func (c *Cluster) slotMap(ctx context.Context, a *redis.Client, addr string, index map[string]int) ([clusterSlots]int8, error) {
	var owner [clusterSlots]int8
	//lint:ignore SA1019 CLUSTER SLOTS still answers on Redis 7 and its reply is simpler to check than CLUSTER SHARDS'.
	slots, err := a.ClusterSlots(ctx).Result()
	if err != nil {
		return owner, fmt.Errorf("%s: CLUSTER SLOTS: %w", addr, err)
	}
	for s := range owner {
		owner[s] = -1
	}
	for _, r := range slots {
		if len(r.Nodes) == 0 || r.Start < 0 || r.End >= clusterSlots || r.Start > r.End {
			return owner, fmt.Errorf("%s: CLUSTER SLOTS: bad range %+v", addr, r)
		}
		m, ok := index[r.Nodes[0].Addr]
		if !ok {
			return owner, fmt.Errorf("%s: CLUSTER SLOTS: unknown master %q", addr, r.Nodes[0].Addr)
		}
		for s := r.Start; s <= r.End; s++ {
			owner[s] = int8(m)
		}
	}
	return owner, c.checkSlotsServed(owner, addr)
}

// checkSlotsServed checks that owner, the slot map the node at addr sees,
// gives every slot a master and every node a slot.
func (c *Cluster) checkSlotsServed(owner [clusterSlots]int8, addr string) error {
	served := make([]bool, len(c.nodes))
	for s, m := range owner {
		if m < 0 {
			return fmt.Errorf("%s: CLUSTER SLOTS: slot %d unassigned", addr, s)
		}
		served[m] = true
	}
	for m, ok := range served {
		if !ok {
			return fmt.Errorf("%s: CLUSTER SLOTS: node %s serves no slot", addr, c.nodes[m].Addr)
		}
	}
	return nil
}

// checkRouting pings every master through cc and writes one key per master
// through cc, reading it back from the node that should hold it.
func (c *Cluster) checkRouting(ctx context.Context, cc *redis.ClusterClient, admins []*redis.Client) error {
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	for i := range c.nodes {
		key := ""
		for n := 0; key == ""; n++ {
			if k := "redistest:probe:" + strconv.Itoa(n); c.MasterForKey(k) == i {
				key = k
			}
		}
		if err := cc.Set(ctx, key, "1", 0).Err(); err != nil {
			return fmt.Errorf("SET %s: %w", key, err)
		}
		n, err := admins[i].Exists(ctx, key).Result()
		if err != nil || n != 1 {
			return fmt.Errorf("%s was written through the ClusterClient but node %s has it %d times (%v)", key, c.nodes[i].Addr, n, err)
		}
		if err := cc.Del(ctx, key).Err(); err != nil {
			return fmt.Errorf("DEL %s: %w", key, err)
		}
	}
	return nil
}

// Addrs returns the nodes' host:port addresses; node i is Addrs()[i].
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Client returns a new ClusterClient of the cluster, with go-redis's default
// options, closed when the test ends. Tests that need other options build
// their own from Addrs.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// NodeClient returns a new plain client of node i alone (for DBSIZE, SCAN,
// CLUSTER commands), closed when the test ends.
func (c *Cluster) NodeClient(i int) *redis.Client {
	nc := redis.NewClient(&redis.Options{Addr: c.nodes[i].Addr})
	c.t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// MasterForKey returns the index of the master that serves key's hash slot.
// It needs no node to be up: it computes the slot (CRC16 of the key's hash
// tag, as CLUSTER KEYSLOT does) and looks it up in the slot map all nodes
// agreed on at start-up.
func (c *Cluster) MasterForKey(key string) int {
	return int(c.owner[KeySlot(key)])
}

// KeySlot returns the Redis Cluster hash slot of key, as CLUSTER KEYSLOT
// does: CRC16 (XMODEM) modulo 16384 of the hash tag, the part between the
// first '{' and the first '}' after it when that part is not empty, or of
// the whole key otherwise.
func KeySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc % clusterSlots)
}

// StopMaster kills master i and waits for its process to exit. Its slots
// stay assigned to it (there are no replicas to fail over to), so commands
// on them fail while the other masters keep serving theirs. Stopping a
// stopped master does nothing.
func (c *Cluster) StopMaster(i int) {
	c.nodes[i].Stop()
	c.mu.Lock()
	c.stopped[i] = true
	c.mu.Unlock()
}

// WaitFailed waits until every running node flags stopped master i as
// failed (FAIL, not just PFAIL): the point from which the cluster, not only
// the clients, treats it as gone. That takes about the node timeout (2 s)
// plus a little gossip; t fails after 20 s.
func (c *Cluster) WaitFailed(i int) {
	c.t.Helper()
	c.mu.Lock()
	stopped := append([]bool(nil), c.stopped...)
	c.mu.Unlock()
	if !stopped[i] {
		c.t.Fatalf("redistest: WaitFailed(%d): master %d is running", i, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var lastErr error
	for j, s := range c.nodes {
		if stopped[j] {
			continue
		}
		a := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		for {
			if lastErr = c.flagsFailed(ctx, a, i); lastErr == nil {
				break
			}
			select {
			case <-ctx.Done():
				a.Close()
				c.t.Fatalf("redistest: master %d not marked failed by node %d after %v: %v", i, j, clusterTimeout, lastErr)
			case <-time.After(50 * time.Millisecond):
			}
		}
		a.Close()
	}
}

// flagsFailed reports, as a nil error, that a's CLUSTER NODES flags node i
// as fail.
func (c *Cluster) flagsFailed(ctx context.Context, a *redis.Client, i int) error {
	nodes, err := a.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != c.ids[i] {
			continue
		}
		for _, flag := range strings.Split(f[2], ",") {
			if flag == "fail" {
				return nil
			}
		}
		return fmt.Errorf("flags %s", f[2])
	}
	return fmt.Errorf("node %s unknown", c.ids[i])
}
