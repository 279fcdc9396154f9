package teamtest

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/thatch-dev/thatch/internal/freeport"
)

// TB is what the cluster needs of a test (testing.TB has it): the benchmark passes its own.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Cluster is n JetStream servers routed to each other.
type Cluster struct {
	t     TB
	opts  []*server.Options
	Nodes []*server.Server // nil while stopped
}

func freePort(t TB) int {
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Start runs a cluster of n nodes (n 1: a single server, no cluster) and stops it when t
// ends. Its nodes tell clients about each other, so a client fails over to another node.
func Start(t TB, n int) *Cluster { return start(t, n, false) }

// StartIsolated is Start with nodes that do not tell clients about each other: a client
// given one node's URL stays cut off while that node is down.
func StartIsolated(t TB, n int) *Cluster { return start(t, n, true) }

func start(t TB, n int, noAdvertise bool) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Nodes: make([]*server.Server, n)}
	routes := make([]string, n)
	cports := make([]int, n)
	for i := range n {
		cports[i] = freePort(t)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", cports[i])
	}
	for i := range n {
		o := &server.Options{ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: freePort(t),
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "team", Host: "127.0.0.1", Port: cports[i], NoAdvertise: noAdvertise}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.opts = append(c.opts, o)
	}
	for i := range n {
		c.StartNode(i)
	}
	t.Cleanup(c.Shutdown)
	c.WaitReady()
	return c
}

// StartNode starts node i (again, on its port and store).
func (c *Cluster) StartNode(i int) {
	c.t.Helper()
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		c.t.Fatalf("team node %d did not start", i+1)
	}
	c.Nodes[i] = s
}

// StopNode stops node i.
func (c *Cluster) StopNode(i int) {
	if s := c.Nodes[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Nodes[i] = nil
	}
}

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port) }

// URLs are every node's client URL, comma-separated.
func (c *Cluster) URLs() string {
	var us []string
	for i := range c.opts {
		us = append(us, c.URL(i))
	}
	return strings.Join(us, ",")
}

// WaitReady waits until the running nodes' JetStream has a meta leader.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.Nodes {
			if s != nil && s.JetStreamEnabled() && (len(c.Nodes) == 1 || s.JetStreamIsLeader()) {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatal("the team cluster elected no JetStream leader in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.Nodes {
		c.StopNode(i)
	}
}
