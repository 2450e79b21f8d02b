package bench

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/jitter"
)

// ContentionConfig sets up the reproduction of the AWS Architecture Blog's
// "Exponential Backoff and Jitter" simulation: Clients contending clients each
// update one row guarded by optimistic concurrency control (read the version,
// then write with it; the write fails if another client wrote in between) and
// retry a failed write after a backoff. It runs in virtual time, so it is
// deterministic for a given Seed and takes no wall time to wait.
type ContentionConfig struct {
	// Clients lists the numbers of contending clients to simulate (the x axis).
	Clients []int
	// Runs is how many independent runs are averaged for each point.
	Runs int
	// Seed makes the whole simulation reproducible.
	Seed uint64
	// Base and Cap are the backoff's first wait and its cap (the blog: 5 ms and 2 s).
	Base, Cap time.Duration
	// NetMean and NetSD describe the one-way network delay, |N(mean, sd)|
	// (the blog: a mean of 10 ms and a variance of 4 ms², so sd 2 ms).
	NetMean, NetSD time.Duration
}

// DefaultContention returns the blog's parameters for clients 1, 5, 10, ..., 100.
func DefaultContention() ContentionConfig {
	clients := []int{1}
	for n := 5; n <= 100; n += 5 {
		clients = append(clients, n)
	}
	return ContentionConfig{
		Clients: clients,
		Runs:    100,
		Seed:    1,
		Base:    5 * time.Millisecond,
		Cap:     2 * time.Second,
		NetMean: 10 * time.Millisecond,
		NetSD:   2 * time.Millisecond,
	}
}

// Strategy is one way of waiting between retries in the contention simulation.
type Strategy struct {
	// Name is what tables and charts call it.
	Name string
	// NoBackoff retries at once (the blog's baseline); Jitter is then unused.
	NoBackoff bool
	// Jitter selects idem's jitter when NoBackoff is false.
	Jitter idem.Jitter
}

// ContentionStrategies returns the strategies the blog compares: no backoff,
// exponential backoff without jitter, and equal, full and decorrelated jitter,
// all but the first computed by the jitter arithmetic idem uses (internal/jitter).
func ContentionStrategies() []Strategy {
	return []Strategy{
		{Name: "no backoff", NoBackoff: true},
		{Name: "exponential, no jitter", Jitter: idem.NoJitter},
		{Name: "equal jitter", Jitter: idem.EqualJitter},
		{Name: "full jitter", Jitter: idem.FullJitter},
		{Name: "decorrelated jitter", Jitter: idem.DecorrelatedJitter},
	}
}

// ContentionPoint is the mean outcome of Runs runs of one strategy with one
// number of clients.
type ContentionPoint struct {
	Strategy string
	Clients  int
	// Calls is the mean number of writes sent until every client had succeeded.
	Calls float64
	// Time is the mean virtual time until the last client succeeded.
	Time time.Duration
}

// RunContention simulates every strategy for every number of clients.
// It panics if cfg has no clients, no runs, or a negative duration.
func RunContention(cfg ContentionConfig, strategies []Strategy) []ContentionPoint {
	if len(cfg.Clients) == 0 || cfg.Runs <= 0 {
		panic("bench: RunContention: Clients and Runs must be set")
	}
	if cfg.Base < 0 || cfg.Cap < 0 || cfg.NetMean < 0 || cfg.NetSD < 0 {
		panic("bench: RunContention: negative duration")
	}
	var out []ContentionPoint
	for si, s := range strategies {
		for _, n := range cfg.Clients {
			if n <= 0 {
				panic(fmt.Sprintf("bench: RunContention: %d clients", n))
			}
			var calls int
			var total time.Duration
			for run := range cfg.Runs {
				stream := uint64(si)<<48 | uint64(n)<<24 | uint64(run)
				c, t := simulateOCC(cfg, s, n, rand.New(rand.NewPCG(cfg.Seed, stream)))
				calls += c
				total += t
			}
			out = append(out, ContentionPoint{
				Strategy: s.Name,
				Clients:  n,
				Calls:    float64(calls) / float64(cfg.Runs),
				Time:     total / time.Duration(cfg.Runs),
			})
		}
	}
	return out
}

// occEvent kinds: a message arriving at the server or back at a client.
const (
	readAtServer = iota
	readReply
	writeAtServer
	writeReply
)

// occEvent is one message in flight, delivered at time at. seq breaks ties in
// the order the events were scheduled, which keeps the simulation deterministic.
type occEvent struct {
	at     time.Duration
	seq    uint64
	kind   int
	client int
	value  int // the version read (readReply, writeAtServer); 1 for a successful write (writeReply)
}

type occQueue []occEvent

func (q occQueue) Len() int { return len(q) }
func (q occQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q occQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *occQueue) Push(x any)   { *q = append(*q, x.(occEvent)) }
func (q *occQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simulateOCC runs one simulation of n clients and returns the number of writes
// the server received and the time the last event happened. Every client reads
// the row's version, writes with it, and on a failed write waits the network
// delay plus its backoff before reading again, as in the blog's simulator.
func simulateOCC(cfg ContentionConfig, s Strategy, n int, rng *rand.Rand) (calls int, end time.Duration) {
	delay := func() time.Duration {
		d := float64(cfg.NetMean) + rng.NormFloat64()*float64(cfg.NetSD)
		if d < 0 {
			d = -d
		}
		return time.Duration(d)
	}
	backoffs := make([]backoff.BackOff, n)
	if !s.NoBackoff {
		for i := range backoffs {
			b := jitter.New(jitter.Kind(s.Jitter), cfg.Base, cfg.Cap, rng.Float64)
			backoffs[i] = &b
		}
	}
	q := make(occQueue, 0, n)
	var seq uint64
	send := func(at time.Duration, kind, client, value int) {
		seq++
		heap.Push(&q, occEvent{at: at, seq: seq, kind: kind, client: client, value: value})
	}
	for c := range n {
		send(delay(), readAtServer, c, 0)
	}
	version := 0
	for q.Len() > 0 {
		e := heap.Pop(&q).(occEvent)
		end = e.at
		switch e.kind {
		case readAtServer:
			send(e.at+delay(), readReply, e.client, version)
		case readReply:
			send(e.at+delay(), writeAtServer, e.client, e.value)
		case writeAtServer:
			calls++
			ok := 0
			if e.value == version {
				version++
				ok = 1
			}
			send(e.at+delay(), writeReply, e.client, ok)
		case writeReply:
			if e.value == 1 {
				continue
			}
			wait := time.Duration(0)
			if b := backoffs[e.client]; b != nil {
				wait = b.NextBackOff()
			}
			send(e.at+delay()+wait, readAtServer, e.client, 0)
		}
	}
	return calls, end
}
