package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"time"

	"github.com/idemkit/idem"

	"github.com/idemkit/idem/server"
	"github.com/idemkit/idem/server/chaos"
	"github.com/idemkit/idem/server/memstore"
	"github.com/idemkit/idem/server/pgstore"
	"github.com/idemkit/idem/server/redisstore"
)

// errUsage is wrapped by the error of invalid flags; main exits with status 2.
var errUsage = errors.New("bad flag")

// config is the validated command line.
type config struct {
	addr        string
	store       string
	postgresURL string
	ledgerURL   string // -ledger-postgres-url
	redisAddr   string // comma list; see redisAddrs
	// Redis topology and durability (-store redis).
	redisCluster        bool
	redisMasterName     string
	redisMinReplicas    int
	redisReplicaTimeout time.Duration
	redisAllowEviction  bool
	redisScopeEntries   int64
	redisScopeBytes     int64
	pgScopeEntries      int64
	pgScopeBytes        int64
	ttl                 time.Duration
	lockTTL             time.Duration
	maxEntries          int
	maxBytes            int64
	// Callers and the process-wide bounds (both modes).
	tokensFile     string
	anonymous      bool
	maxBuffered    int64
	maxWaiting     int
	requestTimeout time.Duration
	// The demo's own (not the gateway's).
	maxPayments     int
	chaos           bool
	chaosFailRate   float64
	chaosDropRate   float64
	chaosDelayMax   time.Duration
	shutdownTimeout time.Duration
	version         bool
	// gateway: -upstream and its flags (gateway_config.go).
	gateway gatewayConfig
}

// Store names accepted by -store.
const (
	storeMemory   = "memory"
	storePostgres = "postgres"
	storeRedis    = "redis"
)

// parseFlags reads args into a config. Errors wrap errUsage, or are
// flag.ErrHelp for -h; flag's messages and usage go to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("idem-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address (host:port; port 0 picks one)")
	fs.StringVar(&c.store, "store", storeMemory, "idempotency store: memory, postgres or redis")
	fs.StringVar(&c.postgresURL, "postgres-url", "", "PostgreSQL connection URL (-store postgres)")
	fs.StringVar(&c.ledgerURL, "ledger-postgres-url", "",
		"PostgreSQL connection URL for the demo's payments (-store memory or redis; default: in memory)")
	fs.StringVar(&c.redisAddr, "redis-addr", "127.0.0.1:6379",
		"Redis address, or a comma list: several addresses mean a Cluster, or the sentinels with -redis-master-name (-store redis)")
	fs.BoolVar(&c.redisCluster, "redis-cluster", false, "treat -redis-addr as Cluster seeds even when it names one node")
	fs.StringVar(&c.redisMasterName, "redis-master-name", "", "use Redis Sentinel: the master's name; -redis-addr lists the sentinels")
	fs.IntVar(&c.redisMinReplicas, "redis-min-replicas", 0,
		"replicas that must acknowledge (WAIT) each claim before the handler runs, and each record; 0: none (asynchronous)")
	fs.DurationVar(&c.redisReplicaTimeout, "redis-replica-timeout", time.Second, "how long each WAIT of -redis-min-replicas waits")
	fs.BoolVar(&c.redisAllowEviction, "redis-allow-eviction", false,
		"start even when Redis's maxmemory-policy can evict records (an evicted record lets a retry run again)")
	fs.DurationVar(&c.ttl, "ttl", server.DefaultTTL, "how long a recorded response is replayed")
	fs.DurationVar(&c.lockTTL, "lock-ttl", server.DefaultLockTTL, "how long a claim lives without renewal (bounds a 409's Retry-After)")
	fs.Int64Var(&c.redisScopeEntries, "redis-scope-max-entries", redisstore.DefaultScopeMaxEntries,
		"records one scope may hold in Redis; past it, the scope's new keys get 503")
	fs.Int64Var(&c.redisScopeBytes, "redis-scope-max-bytes", redisstore.DefaultScopeMaxBytes,
		"bytes of records one scope may hold in Redis; past it, the scope's new keys get 503")
	fs.Int64Var(&c.pgScopeEntries, "postgres-scope-max-entries", pgstore.DefaultScopeMaxEntries,
		"live records one scope may hold in PostgreSQL; past it, the scope's new keys get 503")
	fs.Int64Var(&c.pgScopeBytes, "postgres-scope-max-bytes", pgstore.DefaultScopeMaxBytes,
		"bytes of live records one scope may hold in PostgreSQL; past it, the scope's new keys get 503")
	fs.IntVar(&c.maxEntries, "max-entries", memstore.DefaultMaxEntries, "memory store capacity; when full, new keys get 503")
	fs.Int64Var(&c.maxBytes, "max-bytes", memstore.DefaultMaxBytes, "memory store capacity in bytes; when full, new keys get 503")
	fs.StringVar(&c.tokensFile, "tokens", "",
		"file of the callers' bearer tokens, one \"TENANT TOKEN\" a line: records are the tenant's, unknown tokens get 401 (default: every token is a scope of its own)")
	fs.BoolVar(&c.anonymous, "anonymous", true,
		"serve callers without an Authorization header, all in one public scope; false answers them 401 (default true, false with -tokens)")
	fs.Int64Var(&c.maxBuffered, "max-buffered-bytes", server.DefaultBufferedBytes,
		"bytes of keyed request bodies held at once, by every request together; past it, 503")
	fs.IntVar(&c.maxWaiting, "max-waiting", server.DefaultWaiting,
		"duplicates waiting at once for the first request with their key; past it, 409 at once")
	fs.DurationVar(&c.requestTimeout, "request-timeout", server.DefaultRequestTimeout,
		"deadline of each keyed request, body, store and handler included (0: none)")
	fs.IntVar(&c.maxPayments, "max-payments", defaultMaxPayments,
		"payments the demo's in-memory ledger holds, an eighth of them guaranteed to each caller; past it, 507")
	fs.BoolVar(&c.chaos, "chaos", false, "honour the Chaos-* request headers")
	fs.Float64Var(&c.chaosFailRate, "chaos-fail-rate", 0, "fraction of POSTs answered 503 at random, from 0 to 1")
	fs.Float64Var(&c.chaosDropRate, "chaos-drop-rate", 0, "fraction of POSTs whose connection is cut after the record, from 0 to 1")
	fs.DurationVar(&c.chaosDelayMax, "chaos-delay-max", 0, "random delay before each business write, up to this (at most 1m)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown waits for requests in flight")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	registerGatewayFlags(fs, &c.gateway)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, err
		}
		return config{}, fmt.Errorf("%w: %w", errUsage, err) // flag already printed it
	}
	if fs.NArg() > 0 {
		return config{}, usageErr("unexpected argument %q", fs.Arg(0))
	}
	if err := c.checkStoreFlags(fs); err != nil {
		return config{}, err
	}
	if err := c.gateway.check(fs); err != nil {
		return config{}, err
	}
	if (c.tokensFile != "" || c.gateway.enabled()) && !isSet(fs, "anonymous") {
		c.anonymous = false // authenticated (or gateway) callers only, unless asked
	}
	return c, c.validate()
}

// storeFlags names the flags that only one store reads.
var storeFlags = map[string]string{
	"postgres-url":               storePostgres,
	"redis-addr":                 storeRedis,
	"redis-cluster":              storeRedis,
	"redis-master-name":          storeRedis,
	"redis-min-replicas":         storeRedis,
	"redis-replica-timeout":      storeRedis,
	"redis-allow-eviction":       storeRedis,
	"redis-scope-max-entries":    storeRedis,
	"redis-scope-max-bytes":      storeRedis,
	"postgres-scope-max-entries": storePostgres,
	"postgres-scope-max-bytes":   storePostgres,
	"max-entries":                storeMemory,
	"max-bytes":                  storeMemory,
}

// defaultMaxPayments bounds the demo's in-memory ledger (about 250 bytes a
// payment: 25 MB).
const defaultMaxPayments = 100_000

// checkStoreFlags refuses a flag set on the command line that belongs to
// another store than -store's: it would be silently ignored.
func (c config) checkStoreFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err != nil {
			return
		}
		switch owner, ok := storeFlags[f.Name]; {
		case ok && owner != c.store:
			err = usageErr("-%s belongs to -store %s, not -store %s%s", f.Name, owner, c.store, hint(f.Name))
		case f.Name == "ledger-postgres-url" && c.store == storePostgres:
			err = usageErr("-ledger-postgres-url is for -store memory or redis; -store postgres keeps the payments in -postgres-url's database")
		case f.Name == "max-payments" && (c.store == storePostgres || c.ledgerURL != ""):
			err = usageErr("-max-payments bounds the in-memory ledger; the payments are in PostgreSQL here, bounded by its disk")
		}
	})
	return err
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// hint says where a misplaced flag's intent goes.
func hint(name string) string {
	if name == "postgres-url" {
		return " (to keep the payments in PostgreSQL, use -ledger-postgres-url)"
	}
	return ""
}

// ladderWarning says how -request-timeout breaks the time ladder of
// docs/CONTRACT.md, "" when it does not: a protected request's time must end
// inside the cap of the clients that call the server (the idem client's
// default, idem.DefaultMaxElapsed), or a client on its defaults gives up
// before it hears the answer. It is a warning, not an error: the server's
// clients may have a cap of their own.
func (c config) ladderWarning() string {
	switch {
	case c.requestTimeout == 0:
		return fmt.Sprintf("-request-timeout 0 sets no deadline on a protected request: a client whose cap ends first "+
			"(the idem client's default, WithMaxElapsed %v) gives up without this server's answer", idem.DefaultMaxElapsed)
	case c.requestTimeout >= idem.DefaultMaxElapsed:
		return fmt.Sprintf("-request-timeout %v is not below the idem client's default cap (WithMaxElapsed %v): a client on its "+
			"defaults gives up when this server answers a stalled request, and never hears it; the default is %v",
			c.requestTimeout, idem.DefaultMaxElapsed, server.DefaultRequestTimeout)
	}
	return ""
}

func (c config) validate() error {
	switch {
	case c.addr == "":
		return usageErr("-addr must not be empty")
	case c.store != storeMemory && c.store != storePostgres && c.store != storeRedis:
		return usageErr("-store %q: want memory, postgres or redis", c.store)
	case c.store == storePostgres && c.postgresURL == "":
		return usageErr("-store postgres needs -postgres-url")
	case c.store == storeRedis && c.redisAddr == "":
		return usageErr("-store redis needs -redis-addr")
	case c.store == storeRedis && c.checkRedisAddrs() != nil:
		return c.checkRedisAddrs()
	case c.redisCluster && c.redisMasterName != "":
		return usageErr("-redis-cluster and -redis-master-name exclude each other: a Cluster has no Sentinel master")
	case c.redisMinReplicas < 0:
		return usageErr("-redis-min-replicas %d: must be 0 or more", c.redisMinReplicas)
	case c.redisReplicaTimeout <= 0:
		return usageErr("-redis-replica-timeout %v: must be positive", c.redisReplicaTimeout)
	case c.ttl <= 0:
		return usageErr("-ttl %v: must be positive", c.ttl)
	case c.lockTTL <= 0:
		return usageErr("-lock-ttl %v: must be positive", c.lockTTL)
	case c.maxEntries < 1:
		return usageErr("-max-entries %d: must be at least 1", c.maxEntries)
	case c.maxBytes < 1:
		return usageErr("-max-bytes %d: must be at least 1", c.maxBytes)
	case c.redisScopeEntries < 1:
		return usageErr("-redis-scope-max-entries %d: must be at least 1", c.redisScopeEntries)
	case c.redisScopeBytes < 1:
		return usageErr("-redis-scope-max-bytes %d: must be at least 1", c.redisScopeBytes)
	case c.pgScopeEntries < 1:
		return usageErr("-postgres-scope-max-entries %d: must be at least 1", c.pgScopeEntries)
	case c.pgScopeBytes < 1:
		return usageErr("-postgres-scope-max-bytes %d: must be at least 1", c.pgScopeBytes)
	case c.maxBuffered < 1:
		return usageErr("-max-buffered-bytes %d: must be at least 1", c.maxBuffered)
	case c.maxWaiting < 0:
		return usageErr("-max-waiting %d: must be 0 or more", c.maxWaiting)
	case c.requestTimeout < 0:
		return usageErr("-request-timeout %v: must be 0 or more", c.requestTimeout)
	case c.maxPayments < 1:
		return usageErr("-max-payments %d: must be at least 1", c.maxPayments)
	case c.tokensFile != "" && c.gateway.scopeHeader != "":
		return usageErr("-tokens and -scope-header exclude each other: with -tokens the token names the caller")
	case c.gateway.enabled() && c.requestTimeout > 0 && c.gateway.upstreamTimeout >= c.requestTimeout:
		return usageErr("-upstream-timeout %v: must be less than -request-timeout %v, which bounds each protected request",
			c.gateway.upstreamTimeout, c.requestTimeout)
	case !isRate(c.chaosFailRate):
		return usageErr("-chaos-fail-rate %v: must be from 0 to 1", c.chaosFailRate)
	case !isRate(c.chaosDropRate):
		return usageErr("-chaos-drop-rate %v: must be from 0 to 1", c.chaosDropRate)
	case c.chaosDelayMax < 0 || c.chaosDelayMax > chaos.MaxDelay:
		return usageErr("-chaos-delay-max %v: must be from 0 to %v", c.chaosDelayMax, chaos.MaxDelay)
	case c.shutdownTimeout <= 0:
		return usageErr("-shutdown-timeout %v: must be positive", c.shutdownTimeout)
	}
	return nil
}

// redisAddrs splits -redis-addr at commas, trimming spaces around each.
func (c config) redisAddrs() []string {
	addrs := strings.Split(c.redisAddr, ",")
	for i, a := range addrs {
		addrs[i] = strings.TrimSpace(a)
	}
	return addrs
}

// checkRedisAddrs reports the first entry of -redis-addr that is not host:port.
func (c config) checkRedisAddrs() error {
	for _, a := range c.redisAddrs() {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			return usageErr("-redis-addr %q: each comma-separated address must be host:port", a)
		}
	}
	return nil
}

func isRate(p float64) bool { return !math.IsNaN(p) && p >= 0 && p <= 1 }

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}
