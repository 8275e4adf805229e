package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// This file places the StateIndex on a Proto.Actor cluster (DESIGN §5).
//
// Placement: a scope's home is a stable function of the scope and the
// *configured* storage members (HomeOf, rendezvous hashing over their
// names), never of who is alive. Each storage member registers a cluster
// kind of its own, "stateindex@<member>", whose grains are its shards
// ("0".."Shards-1"); a Client maps scope → home member → shard and asks the
// cluster for that grain. While the home is down its kind has no member
// and the scope is unavailable — quickly, with a clear error — rather than
// re-homed to a member that does not hold its data, which would fork its
// history. Each member refuses scopes whose home it is not, and records its
// name, the member list and its shard count in its data file so that a
// misconfigured restart refuses to start.
//
// The cluster's own placement gives no single-activation guarantee while
// membership changes; none is needed: the store's expected version makes a
// second writer of a scope fail instead of forking it, and request ids make
// the retries safe.
//
// Shared-store mode (ClusterConfig.SharedStore; DESIGN §13): the members
// share one store that fences (eventstore.Fencer: PostgreSQL), so any
// member can serve any scope and placement follows the *live* members. Each
// member registers the one kind SharedKind and serves any scope at its
// gateway (RemotePID); a Client sends a scope's requests to its owner
// under the live members it sees (SharedOwner: rendezvous hashing of the
// scope over them, the same rule as HomeOf) — no grain lookup, so no
// round trip to a placement actor and no five-second blocking Get. When a
// member dies, its scopes' owner is recomputed as soon as the Client sees
// it marked down (about one health interval), and the new owner loads
// them from the shared store. A member follows its own view of the live
// members the same way and drops the scopes it no longer owns
// (placement.go). Views can differ for a moment (each node polls on its
// own) and for the length of a rolling restart that changes the member
// list; a scope served by two members meanwhile is safe because every
// activation takes the next owner epoch and every append checks it: the
// older owner's writes are refused, and its caller resends.

// ClusterConfig describes a StateIndex cluster. Every member and every
// client must use the same Name, Members and Shards.
type ClusterConfig struct {
	// Name is the cluster's name.
	Name string
	// Members are the storage members' names: their advertised remoting
	// addresses (host:port, as given to `stateindex serve --listen`).
	// Each one also serves its health endpoint, which every node polls
	// (automanaged's protocol, see healthProvider), on the next port of
	// the same host (see HealthAddress).
	Members []string
	// Shards is the number of shards (grains) of each member; default 16.
	Shards int
	// HealthInterval is how often every node polls every member's health
	// endpoint: a member that stops answering is marked down after about
	// one interval. Default one second.
	HealthInterval time.Duration
	// MaxMessageBytes bounds one encoded request or reply (default
	// wire.DefaultMaxBytes, 1 MiB).
	MaxMessageBytes int
	// RequestTimeout is a Client's deadline when its context has none
	// (default DefaultConfig().RequestTimeout).
	RequestTimeout time.Duration
	// Logger receives a line each time a storage member comes up or goes
	// down, as this node sees it (default slog.Default()).
	Logger *slog.Logger
	// SharedStore selects shared-store mode: every member serves any
	// scope from one store they all share (a store that implements
	// eventstore.Fencer, such as PostgreSQL), placed on the live members;
	// a member that dies has its scopes served by the others. Members and
	// clients of one cluster must agree on it. Off (the default): each
	// member keeps its scopes in its own store at their fixed home.
	SharedStore bool
	// Security, when set, puts remoting and the health endpoint under TLS
	// and the shared secret (see NewSecurity); every node of the cluster
	// needs an equivalent one. Nil: plaintext, anyone admitted.
	Security *Security
}

// SharedKind is the cluster kind every member of a shared-store cluster
// registers: the topology's members that host it are the live storage
// members. (Its grains, if anyone asks the cluster for one, serve any
// scope, as the member's gateway does.)
const SharedKind = "stateindex"

func (cc ClusterConfig) withDefaults() (ClusterConfig, error) {
	if cc.Name == "" {
		return cc, errors.New("actors: the cluster needs a name")
	}
	if len(cc.Members) == 0 {
		return cc, errors.New("actors: the cluster needs its list of storage members")
	}
	cc.Members = slices.Clone(cc.Members)
	slices.Sort(cc.Members)
	for i, m := range cc.Members {
		if _, err := HealthAddress(m); err != nil {
			return cc, err
		}
		if i > 0 && cc.Members[i-1] == m {
			return cc, fmt.Errorf("actors: member %s is listed twice", m)
		}
	}
	for _, m := range cc.Members {
		h, _ := HealthAddress(m)
		if slices.Contains(cc.Members, h) {
			return cc, fmt.Errorf("actors: member %s serves its health endpoint on its port + 1, %s, which is member %s's address: "+
				"give the members ports at least 2 apart (e.g. 7400, 7402, 7404)", m, h, h)
		}
	}
	if cc.Shards <= 0 {
		cc.Shards = DefaultConfig().Shards
	}
	if cc.HealthInterval <= 0 {
		cc.HealthInterval = time.Second
	}
	if cc.MaxMessageBytes <= 0 {
		cc.MaxMessageBytes = wire.DefaultMaxBytes
	}
	if cc.RequestTimeout <= 0 {
		cc.RequestTimeout = DefaultConfig().RequestTimeout
	}
	if cc.Logger == nil {
		cc.Logger = slog.Default()
	}
	return cc, nil
}

// HealthAddress is the address of member's health endpoint: the member's
// port plus one, on the same host.
func HealthAddress(member string) (string, error) {
	host, port, err := splitAddress(member)
	if err != nil {
		return "", err
	}
	if port >= 65535 {
		return "", fmt.Errorf("actors: member %s: no port left for its health endpoint", member)
	}
	return net.JoinHostPort(host, strconv.Itoa(port+1)), nil
}

func splitAddress(member string) (string, int, error) {
	host, p, err := net.SplitHostPort(member)
	if err != nil {
		return "", 0, fmt.Errorf("actors: member %q is not host:port: %w", member, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("actors: member %q: port must be 1..65535", member)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", 0, fmt.Errorf("actors: member %q: give the address others reach it at, not %q", member, host)
	}
	return host, port, nil
}

// HomeOf returns the member among members that is scope's home: the one
// with the highest rendezvous score for it. It depends only on the scope
// and the configured list (not its order), so it never changes while the
// list stays the same, whoever is alive.
func HomeOf(scope string, members []string) string {
	var best string
	var bestScore uint64
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(scope))
		s := mix64(h.Sum64())
		if best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// mix64 is splitmix64's finalizer: FNV alone scores similar strings alike.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// KindOf is the cluster kind under which member serves its scopes.
func KindOf(member string) string { return "stateindex@" + member }

// ClusterNode is this process's place in a StateIndex cluster: a storage
// member (StartMember), which serves the scopes whose home it is, or a
// client (JoinCluster). Either gives Clients that reach every scope.
type ClusterNode struct {
	sys      *actor.ActorSystem
	cl       *cluster.Cluster
	cc       ClusterConfig
	self     string
	srv      *Server
	gateway  *actor.PID
	provider *healthProvider
	router   *clusterRouter
	stopOnce sync.Once
	// onLive, on a member of a shared-store cluster, is told each new
	// list of live members (its share of the scopes follows it).
	onLive func(live []string)
}

// StartMember starts the StateIndex on store as storage member self of the
// cluster cc: it checks (and on first use records) the data file's
// identity, starts the shards (cc.Shards of them; cfg.Shards is ignored),
// exposes them as the grains of kind KindOf(self) and as RemotePID(self),
// and joins the cluster (Proto.Actor's StartMember takes about a second).
// The store stays the caller's: close it after Stop.
func StartMember(sys *actor.ActorSystem, store eventstore.Store, cfg Config, cc ClusterConfig, self string) (*ClusterNode, error) {
	cc, err := cc.withDefaults()
	if err != nil {
		return nil, err
	}
	if !slices.Contains(cc.Members, self) {
		return nil, fmt.Errorf("actors: %s is not one of the cluster's members %v", self, cc.Members)
	}
	if cc.SharedStore {
		return startSharedMember(sys, store, cfg, cc, self)
	}
	if err := claimIdentity(store, cc, self); err != nil {
		return nil, err
	}
	cfg.Shards = cc.Shards
	srv, err := start(sys, store, cfg, startOptions{})
	if err != nil {
		return nil, err
	}
	owns := func(scope string) (string, bool) {
		home := HomeOf(scope, cc.Members)
		return home, home == self
	}
	n := &ClusterNode{sys: sys, cc: cc, self: self, srv: srv}
	kind := cluster.NewKind(KindOf(self), actor.PropsFromProducer(func() actor.Actor {
		return &gateway{srv: srv, limit: cc.MaxMessageBytes, owns: owns}
	}))
	if err := n.join(self, true, kind); err != nil {
		srv.Stop()
		return nil, err
	}
	if n.gateway, err = srv.expose(cc.MaxMessageBytes, owns); err != nil {
		n.Stop()
		return nil, err
	}
	// The outbox settles through the cluster Client: a reserving scope
	// may live on another member (the work's scopes are this member's).
	if !srv.cfg.OutboxOff {
		srv.outbox.start(srv.Client(), n.Client())
	}
	return n, nil
}

// startSharedMember is StartMember in shared-store mode: no identity to
// claim (the store is everyone's), the kind SharedKind, a gateway that
// serves any scope, and a share of the scopes that follows this member's
// view of the live members.
func startSharedMember(sys *actor.ActorSystem, store eventstore.Store, cfg Config, cc ClusterConfig, self string) (*ClusterNode, error) {
	if _, ok := store.(eventstore.Fencer); !ok {
		return nil, fmt.Errorf("actors: a shared-store cluster needs a store that fences a scope's owners (eventstore.Fencer: PostgreSQL); %T does not, "+
			"and members writing one scope through it could not tell who owns it", store)
	}
	cfg.Shards = cc.Shards
	if cfg.Owner == "" {
		// Fencing on: every scope this member activates takes the next
		// owner epoch, and a member that restarts is a new owner.
		cfg.Owner = OwnerName(self)
	}
	srv, err := start(sys, store, cfg, startOptions{shared: true, registryTable: memberTable(registryTable, self)})
	if err != nil {
		return nil, err
	}
	n := &ClusterNode{sys: sys, cc: cc, self: self, srv: srv}
	n.onLive = func(live []string) {
		srv.replacePlacement(func(scope string) bool { return SharedOwner(scope, live) == self }, live)
	}
	kind := cluster.NewKind(SharedKind, actor.PropsFromProducer(func() actor.Actor {
		return &gateway{srv: srv, limit: cc.MaxMessageBytes}
	}))
	// The gateway first: the others see this member as soon as its health
	// endpoint answers, a second before Proto.Actor's StartMember returns,
	// and send it their requests at once.
	if n.gateway, err = srv.expose(cc.MaxMessageBytes, nil); err != nil {
		srv.Stop()
		return nil, err
	}
	if err := n.join(self, true, kind); err != nil {
		_ = sys.Root.PoisonFuture(n.gateway).Wait()
		srv.Stop()
		return nil, err
	}
	if !srv.cfg.OutboxOff {
		srv.outbox.start(srv.Client(), n.Client())
	}
	return n, nil
}

// JoinCluster joins the cluster cc as a client that serves no scopes,
// reachable for replies at listen (host:port; port 0 picks a free one).
func JoinCluster(sys *actor.ActorSystem, cc ClusterConfig, listen string) (*ClusterNode, error) {
	cc, err := cc.withDefaults()
	if err != nil {
		return nil, err
	}
	n := &ClusterNode{sys: sys, cc: cc}
	if err := n.join(listen, false, nil); err != nil {
		return nil, err
	}
	return n, nil
}

// claimIdentity checks the data file's recorded identity, or records it,
// when the store keeps one. A file without one that holds scopes homed
// elsewhere (a standalone server's) is refused: joining would hide them.
func claimIdentity(store eventstore.Store, cc ClusterConfig, self string) error {
	ids, ok := store.(interface {
		Identity(context.Context) (eventstore.Identity, bool, error)
		ClaimIdentity(context.Context, eventstore.Identity) error
	})
	if !ok {
		return nil
	}
	ctx := context.Background()
	_, has, err := ids.Identity(ctx)
	if err != nil {
		return err
	}
	if !has {
		var foreign []string
		total := 0
		err := store.Streams(ctx, func(info eventstore.StreamInfo) error {
			total++
			if HomeOf(info.Stream, cc.Members) != self && len(foreign) < 3 {
				foreign = append(foreign, info.Stream)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(foreign) > 0 {
			return fmt.Errorf("actors: the data file holds %d scopes and no cluster identity, and some (%v…) have their home on another member: "+
				"it was written by a standalone server, and joining the cluster as %s would hide them; a file's scopes cannot be re-homed yet", total, foreign, self)
		}
	}
	return ids.ClaimIdentity(ctx, eventstore.Identity{Cluster: cc.Name, Member: self, Members: cc.Members, Shards: cc.Shards})
}

// join starts remoting on addr and the cluster with the health provider
// (automanaged's protocol) and the disthash identity lookup.
func (n *ClusterNode) join(addr string, member bool, kind *cluster.Kind) (err error) {
	host, port, err := splitListen(addr)
	if err != nil {
		return err
	}
	if err := checkListen(net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
		return err
	}
	var hosts []string
	for _, m := range n.cc.Members {
		h, _ := HealthAddress(m)
		hosts = append(hosts, h)
	}
	// A member's health endpoint listens on the member's own host (see
	// healthProvider).
	var health net.Listener
	if member {
		if health, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port+1))); err != nil {
			return fmt.Errorf("actors: the health endpoint of %s: %w", addr, err)
		}
	}
	n.provider = newHealthProvider(n.cc.HealthInterval, hosts, health, n.cc.Security, n.cc.Logger)
	var opts []cluster.ConfigOption
	if kind != nil {
		opts = append(opts, cluster.WithKinds(kind))
	}
	rc := watchConnections(n.sys, RemoteConfigWithLimit(host, port, n.cc.MaxMessageBytes, WithSecurity(n.cc.Security)))
	conf := cluster.Configure(n.cc.Name, n.provider, disthash.New(), rc, opts...)
	n.cl = cluster.New(n.sys, conf)
	// Subscribe before the cluster starts, so that no topology is missed.
	n.router = newClusterRouter(n.sys, n.cl, n.cc, n.self, n.onLive)
	defer func() {
		if p := recover(); p != nil {
			n.provider.Shutdown(false)
			err = fmt.Errorf("actors: joining cluster %q at %s: %v", n.cc.Name, addr, p)
		}
	}()
	if member {
		n.cl.StartMember()
	} else {
		n.cl.StartClient()
	}
	// Know who is up before the first request: one poll of every health
	// endpoint (an unreachable one gives up after two seconds).
	select {
	case <-n.router.first:
	case <-time.After(2*n.cc.HealthInterval + 3*time.Second):
	}
	return nil
}

// splitListen is splitAddress that allows port 0.
func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("actors: %q is not host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65534 {
		return "", 0, fmt.Errorf("actors: %q: port must be 0..65534", addr)
	}
	if host == "" {
		return "", 0, fmt.Errorf("actors: %q: give the address others reach this node at", addr)
	}
	return host, port, nil
}

// Client returns a Client that reaches every scope of the cluster at its
// home member (in shared-store mode: at its owner among the live members).
func (n *ClusterNode) Client() *Client {
	if n.cc.SharedStore {
		// One store, one log: a global request goes to any live member,
		// and write positions are the store's.
		return &Client{root: n.sys.Root, timeout: n.cc.RequestTimeout, newID: NewRequestID, send: n.router.send, positions: newWritePositions()}
	}
	return &Client{root: n.sys.Root, timeout: n.cc.RequestTimeout, newID: NewRequestID, send: n.router.send,
		members: func() []string { return slices.Clone(n.cc.Members) }, sendTo: n.router.sendTo,
		positions: newWritePositions(), home: func(scope string) string { return HomeOf(scope, n.cc.Members) }}
}

// Cluster is the node's Proto.Actor cluster (hooks reach kinds with it).
func (n *ClusterNode) Cluster() *cluster.Cluster { return n.cl }

// Server is the member's StateIndex (nil on a client node).
func (n *ClusterNode) Server() *Server { return n.srv }

// Address is this node's remoting address.
func (n *ClusterNode) Address() string { return n.sys.Address() }

// HealthAddr is the address a member's health endpoint listens on (its
// own host, port + 1); "" on a client node.
func (n *ClusterNode) HealthAddr() string {
	if a := n.provider.Addr(); a != nil {
		return a.String()
	}
	return ""
}

// Live lists the storage members this node currently sees up, sorted.
func (n *ClusterNode) Live() []string { return n.router.liveMembers() }

// Home is scope's home member; in shared-store mode, the live member that
// serves it as this node sees them ("" if none is live).
func (n *ClusterNode) Home(scope string) string {
	if n.cc.SharedStore {
		return SharedOwner(scope, n.router.liveMembers())
	}
	return HomeOf(scope, n.cc.Members)
}

// Shared reports whether the cluster is in shared-store mode.
func (n *ClusterNode) Shared() bool { return n.cc.SharedStore }

// Stop leaves the cluster. A member first stops taking remote requests,
// answers the ones it holds, then leaves (Proto.Actor's graceful leave takes
// about two seconds). The actor system is shut down; the store is the
// caller's to close afterwards.
func (n *ClusterNode) Stop() {
	n.stopOnce.Do(func() {
		if n.srv == nil {
			// Cluster.Shutdown assumes a member (its gossip is not started
			// on a client and panics): stop the parts a client started.
			_ = n.provider.DeregisterMember()
			n.sys.Shutdown()
			n.cl.Remote.Shutdown(false)
			return
		}
		if n.gateway != nil {
			_ = n.sys.Root.PoisonFuture(n.gateway).Wait()
		}
		n.srv.Stop()
		n.cl.Shutdown(true)
	})
}

// clusterRouter is a cluster Client's transport: it follows the topology,
// finds each scope's grain at its home member and sends requests through
// the actor system's transport.
type clusterRouter struct {
	t       *remoteTransport
	cl      *cluster.Cluster
	members []string
	shards  int
	limit   int
	log     *slog.Logger
	// shared: a shared-store cluster (the scopes follow the live members);
	// self is this node's name if it is a member; onLive hears each new
	// list of live members (nil on a client).
	shared bool
	self   string
	onLive func(live []string)

	mu sync.Mutex
	// live holds the storage members in the topology that serve their kind.
	live    map[string]*memberState
	order   []string              // live's names, sorted
	pids    map[string]*actor.PID // "member/shard" → grain
	lookups map[string]*grainLookup
	// first is closed when the first topology arrives.
	first     chan struct{}
	firstOnce sync.Once
}

// memberState is one incarnation of a live member.
type memberState struct {
	id   string
	down chan struct{} // closed when this incarnation leaves the topology
}

type grainLookup struct {
	done chan struct{}
	pid  *actor.PID
}

func newClusterRouter(sys *actor.ActorSystem, cl *cluster.Cluster, cc ClusterConfig, self string, onLive func([]string)) *clusterRouter {
	r := &clusterRouter{t: transportFor(sys), cl: cl, members: cc.Members, shards: cc.Shards, limit: cc.MaxMessageBytes, log: cc.Logger,
		shared: cc.SharedStore, self: self, onLive: onLive,
		live: map[string]*memberState{}, pids: map[string]*actor.PID{}, lookups: map[string]*grainLookup{}, first: make(chan struct{})}
	sys.EventStream.SubscribeWithPredicate(func(evt any) { r.onTopology(evt.(*cluster.ClusterTopology)) },
		func(evt any) bool { _, ok := evt.(*cluster.ClusterTopology); return ok })
	return r
}

// onTopology runs inside Proto.Actor's member list update: it must not
// block nor call back into the cluster.
func (r *clusterRouter) onTopology(t *cluster.ClusterTopology) {
	now := map[string]string{}
	for _, m := range t.Members {
		addr := m.Address()
		if r.shared {
			// Any member serving the kind counts, listed here or not: during
			// a rolling restart that changes the list, the lists differ.
			if slices.Contains(m.Kinds, SharedKind) {
				now[addr] = m.Id
			}
			continue
		}
		if _, ok := slices.BinarySearch(r.members, addr); ok && slices.Contains(m.Kinds, KindOf(addr)) {
			now[addr] = m.Id
		}
	}
	var gone, came []string
	r.mu.Lock()
	for addr, st := range r.live {
		if id, ok := now[addr]; !ok || id != st.id {
			close(st.down)
			delete(r.live, addr)
			gone = append(gone, addr)
			for shard := 0; shard < r.shards; shard++ {
				delete(r.pids, grainKey(addr, shard))
			}
		}
	}
	for addr, id := range now {
		if r.live[addr] == nil {
			r.live[addr] = &memberState{id: id, down: make(chan struct{})}
			came = append(came, addr)
		}
	}
	live := len(r.live)
	changed := len(gone) > 0 || len(came) > 0
	if changed || r.order == nil {
		order := make([]string, 0, len(r.live))
		for addr := range r.live {
			order = append(order, addr)
		}
		slices.Sort(order)
		r.order = order
	}
	order := r.order
	r.mu.Unlock()
	if r.shared {
		// Tell the member its new share before anything else: its shards
		// drop what moved away.
		if r.onLive != nil && (changed || !r.firstSeen()) {
			r.onLive(order)
		}
		for _, addr := range gone {
			r.log.Warn("stateindex: storage member down: the live members serve its scopes from the shared store", "member", addr, "live", strings.Join(order, ","))
			r.t.failAll(addr, &OutcomeUnknownError{Address: addr, Reason: "the member serving the scope was marked down"})
		}
		for _, addr := range came {
			r.log.Info("stateindex: storage member up", "member", addr, "live", strings.Join(order, ","))
		}
		r.firstOnce.Do(func() { close(r.first) })
		return
	}
	for _, addr := range gone {
		r.log.Warn("stateindex: storage member down: its scopes are unavailable until it is back", "member", addr, "live", live, "members", len(r.members))
		r.t.failAll(addr, &OutcomeUnknownError{Address: addr, Reason: "its home member was marked down"})
	}
	for _, addr := range came {
		r.log.Info("stateindex: storage member up", "member", addr, "live", live, "members", len(r.members))
	}
	r.firstOnce.Do(func() { close(r.first) })
}

// firstSeen reports whether a topology was seen before this one.
func (r *clusterRouter) firstSeen() bool {
	select {
	case <-r.first:
		return true
	default:
		return false
	}
}

func (r *clusterRouter) liveMembers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

func grainKey(member string, shard int) string { return member + "/" + strconv.Itoa(shard) }

func scopeUnavailable(scope, home, why string) *messages.Error {
	return messages.Errorf(messages.CodeUnavailable,
		"scope %q is unavailable: its home member %s %s; it is never served elsewhere (that would fork its history), and the request was not applied", scope, home, why)
}

// send carries one request to its scope's grain (in shared-store mode:
// to its owner's gateway, sendShared).
func (r *clusterRouter) send(ctx context.Context, req messages.Request, timeout time.Duration) (any, error) {
	if r.shared {
		return r.sendShared(ctx, req, timeout)
	}
	if messages.IsGlobal(req) {
		return nil, messages.Errorf(messages.CodeBadRequest, "%s names no scope: a cluster Client sends it to each member (its Client method does)", req.Op())
	}
	msg, err := wire.Encode(req, r.limit)
	if err != nil {
		return nil, err
	}
	scope := req.ScopeName()
	home := HomeOf(scope, r.members)
	shard := ShardOf(scope, r.shards)
	deadline := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		st := r.live[home]
		r.mu.Unlock()
		if st == nil {
			return nil, scopeUnavailable(scope, home, "is down (or has not joined yet)")
		}
		pid, err := r.grain(ctx, scope, home, shard, st, deadline)
		if err != nil {
			return nil, err
		}
		res, err := r.t.request(ctx, pid, msg, time.Until(deadline))
		if errors.Is(err, errNotDelivered) {
			r.mu.Lock()
			if r.pids[grainKey(home, shard)] == pid {
				delete(r.pids, grainKey(home, shard))
			}
			r.mu.Unlock()
			// Not delivered: resending is safe. Once, for a grain that was
			// passivated since we looked it up.
			if attempt == 0 && time.Until(deadline) > 0 {
				continue
			}
			return nil, scopeUnavailable(scope, home, "did not receive the request"+notDeliveredWhy(err))
		}
		return unwrapReply(pid, res, err)
	}
}

// sendTo carries a global request to member's gateway (RemotePID): a
// member that is down answers unavailable, naming it.
func (r *clusterRouter) sendTo(ctx context.Context, member string, req messages.Request, timeout time.Duration) (any, error) {
	msg, err := wire.Encode(req, r.limit)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	st := r.live[member]
	r.mu.Unlock()
	if st == nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "member %s is down (or has not joined yet): %s not served there", member, req.Op())
	}
	pid := RemotePID(member)
	res, err := r.t.request(ctx, pid, msg, timeout)
	if errors.Is(err, errNotDelivered) {
		return nil, messages.Errorf(messages.CodeUnavailable, "member %s did not receive %s%s", member, req.Op(), notDeliveredWhy(err))
	}
	return unwrapReply(pid, res, err)
}

// grain returns the PID of home's shard grain, asking the cluster (which
// activates it) when it is not known; it gives up when the member goes
// down, ctx ends or the deadline passes.
func (r *clusterRouter) grain(ctx context.Context, scope, home string, shard int, st *memberState, deadline time.Time) (*actor.PID, error) {
	key := grainKey(home, shard)
	r.mu.Lock()
	if pid := r.pids[key]; pid != nil {
		r.mu.Unlock()
		return pid, nil
	}
	l := r.lookups[key]
	if l == nil {
		l = &grainLookup{done: make(chan struct{})}
		r.lookups[key] = l
		go r.resolve(key, l, home, shard, st)
	}
	r.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-l.done:
		if l.pid == nil {
			return nil, scopeUnavailable(scope, home, "could not activate the scope's shard")
		}
		return l.pid, nil
	case <-st.down:
		return nil, scopeUnavailable(scope, home, "went down")
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case <-timer.C:
		return nil, ErrTimeout
	}
}

// resolve asks the cluster for a grain (Proto.Actor's Get blocks for up to
// five seconds and takes no context, hence its own goroutine). Right after
// a member joins, the identity lookup may not know it yet (it learns the
// topology after this router does): resolve asks again for a few seconds
// while the member stays up.
func (r *clusterRouter) resolve(key string, l *grainLookup, home string, shard int, st *memberState) {
	var pid *actor.PID
	for giveUp := time.Now().Add(3 * time.Second); ; {
		if pid = r.cl.Get(strconv.Itoa(shard), KindOf(home)); pid != nil || time.Now().After(giveUp) {
			break
		}
		select {
		case <-st.down:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	r.mu.Lock()
	if pid != nil && r.live[home] == st {
		r.pids[key] = pid
	}
	delete(r.lookups, key)
	l.pid = pid
	r.mu.Unlock()
	close(l.done)
}

// sendShared carries one request of a shared-store cluster to the gateway
// of the live member that owns its scope (a global request: to this node if
// it is a live member, else to one live member). What was certainly not
// applied is resent, re-placed, until the deadline: a request that was not
// delivered (the member stopped, or was not reachable), after a pause that
// ends early when the member is marked down; and a scope's request whose
// member was lost with it in flight — it carries its request id (the
// Client gives every mutating request one before sending), so the new
// owner applies it at most once, or answers it as the lost member did.
func (r *clusterRouter) sendShared(ctx context.Context, req messages.Request, timeout time.Duration) (any, error) {
	msg, err := wire.Encode(req, r.limit)
	if err != nil {
		return nil, err
	}
	global := messages.IsGlobal(req)
	key := req.ScopeName()
	if global {
		key = globalKey(req.Op())
	}
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		owner := SharedOwner(key, r.order)
		if global && r.live[r.self] != nil {
			owner = r.self
		}
		st := r.live[owner]
		r.mu.Unlock()
		if st == nil {
			what := fmt.Sprintf("scope %q", key)
			if global {
				what = req.Op().String()
			}
			return nil, messages.Errorf(messages.CodeUnavailable,
				"%s is unavailable: no storage member is up (or this node has not seen one yet); the request was not applied", what)
		}
		pid := RemotePID(owner)
		res, err := r.t.request(ctx, pid, msg, time.Until(deadline))
		var lost *OutcomeUnknownError
		switch {
		case errors.Is(err, errNotDelivered):
			if !r.pause(ctx, st, deadline) {
				return nil, messages.Errorf(messages.CodeUnavailable,
					"%s: member %s did not receive the request and no other member took its place before the deadline; not applied", key, owner)
			}
			continue
		case errors.As(err, &lost) && !global && ctx.Err() == nil && time.Now().Before(deadline):
			if !r.pause(ctx, st, deadline) {
				return nil, err
			}
			continue
		}
		return unwrapReply(pid, res, err)
	}
}

// pause waits before a resend: until member st is marked down, a short
// while passes, or the deadline or ctx ends (false).
func (r *clusterRouter) pause(ctx context.Context, st *memberState, deadline time.Time) bool {
	wait := min(50*time.Millisecond, time.Until(deadline))
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-st.down:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return ctx.Err() == nil && time.Now().Before(deadline)
}
