package failovertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/internal/proctest"
)

const (
	requestTimeout = 5 * time.Second
	healthInterval = 300 * time.Millisecond
	// slack is what scheduling on a loaded 2-core machine may add to a
	// deadline the Client honours.
	slack = 500 * time.Millisecond
	// storeEnv is the variable a member reads its store's URL from
	// (serve --store env:STATEINDEX_STORE_URL): the URL stays off the
	// command line, as the README advises.
	storeEnv = "STATEINDEX_STORE_URL"
)

var serving = regexp.MustCompile(`stateindex serving`)

// skipUnlessReady skips a failover test that cannot run here, saying why.
func skipUnlessReady(t *testing.T) string {
	t.Helper()
	if os.Getenv("STATEINDEX_CLUSTER_TEST") == "" {
		t.Skip("multi-process failover test: run `make cluster-test` (STATEINDEX_CLUSTER_TEST=1, and STATEINDEX_PG_URL)")
	}
	base := os.Getenv("STATEINDEX_PG_URL")
	if base == "" {
		t.Skip("STATEINDEX_PG_URL is not set: the failover test needs a PostgreSQL server (CI starts one with .ci/postgres.sh start)")
	}
	return base
}

// withParam sets a query parameter of a postgres:// URL.
func withParam(t *testing.T, base, key, value string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err, "STATEINDEX_PG_URL must be a postgres:// URL")
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// pgExec runs SQL on the server outside any store.
func pgExec(t *testing.T, u, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err, sql)
}

// freshSchema creates a schema of the test's own (dropped at the end
// unless the test failed, so that its data can be looked at), creates the
// store's tables in it, and installs the audit triggers (auditSQL) if
// audit is set. It
// returns the schema's name and a URL whose search_path selects it.
func freshSchema(t *testing.T, base string, audit bool) (string, string) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "failover_" + hex.EncodeToString(b[:])
	pgExec(t, base, "CREATE SCHEMA "+name)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("schema %s kept for inspection (DROP SCHEMA %s CASCADE)", name, name)
			return
		}
		pgExec(t, base, "DROP SCHEMA "+name+" CASCADE")
	})
	u := withParam(t, base, "search_path", name)
	st, err := eventstore.OpenPostgres(context.Background(), u, nil)
	require.NoError(t, err, "creating the store's schema")
	require.NoError(t, st.Close())
	if audit {
		pgExec(t, u, strings.ReplaceAll(auditSQL, "SCHEMA", name))
	}
	return name, u
}

// auditSQL records, in the same transaction as each write, who wrote what
// under which owner: every record inserted (its stream, version, the
// writing session's application_name — each member connects with its own
// address as application_name — and the stream's owner and epoch as the
// transaction sees them) and every change of a stream's owner. The store
// reads a fenced stream's owner row FOR SHARE before it writes, so the
// owner the trigger reads is the one the write was checked against: a
// record whose writer is not its owner would be a write by a deposed
// member. It relies on the store's schema (si_events, si_owners) and
// nothing else.
const auditSQL = `
CREATE TABLE audit_events (seq bigint, stream text, version bigint, writer text, owner text, epoch bigint, at timestamptz);
CREATE TABLE audit_owners (stream text, owner text, epoch bigint, writer text, at timestamptz);
CREATE FUNCTION audit_event() RETURNS trigger LANGUAGE plpgsql SET search_path = SCHEMA AS $$
BEGIN
	INSERT INTO audit_events (seq, stream, version, writer, owner, epoch, at)
	SELECT NEW.seq, NEW.stream, NEW.version, current_setting('application_name'), o.owner, o.epoch, clock_timestamp()
	FROM (SELECT 1) AS one LEFT JOIN si_owners o ON o.stream = NEW.stream;
	RETURN NULL;
END $$;
CREATE TRIGGER audit_event AFTER INSERT ON si_events FOR EACH ROW EXECUTE FUNCTION audit_event();
CREATE FUNCTION audit_owner() RETURNS trigger LANGUAGE plpgsql SET search_path = SCHEMA AS $$
BEGIN
	INSERT INTO audit_owners (stream, owner, epoch, writer, at)
	VALUES (NEW.stream, NEW.owner, NEW.epoch, current_setting('application_name'), clock_timestamp());
	RETURN NULL;
END $$;
CREATE TRIGGER audit_owner AFTER INSERT OR UPDATE ON si_owners FOR EACH ROW EXECUTE FUNCTION audit_owner();
`

// cluster is the processes of one test.
type cluster struct {
	t      *testing.T
	server string // the stateindex binary
	driver string // the driver binary
	url    string // the store, schema selected
	data   string // a data directory (holds nothing with a shared store)
}

func newCluster(t *testing.T, base string, audit bool) (*cluster, string) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	schema, u := freshSchema(t, base, audit)
	c := &cluster{t: t, server: proctest.Build(t, root, "./cmd/stateindex"), driver: proctest.Build(t, root, "./internal/failovertest/driver"),
		url: u, data: t.TempDir()}
	return c, schema
}

// member starts `stateindex serve --store env:… --cluster` at addr with
// peers, and waits until it serves.
func (c *cluster) member(name, addr string, peers []string) *proctest.Proc {
	c.t.Helper()
	args := []string{"serve", "--store", "env:" + storeEnv, "--data", filepath.Join(c.data, strings.ReplaceAll(addr, ":", "_")),
		"--listen", addr, "--cluster", "failover", "--peers", strings.Join(peers, ","),
		"--health-interval", healthInterval.String(), "--log-level", "info", "--snapshot-every", "16"}
	p := proctest.Start(c.t, name, c.server, args, storeEnv+"="+withParam(c.t, c.url, "application_name", addr))
	p.WaitLine(0, serving, 30*time.Second)
	return p
}

// start starts the driver on scopes, polling peers, once expect members
// are up.
func (c *cluster) start(peers []string, expect, scopes, workers int, prefix string) *proctest.Proc {
	c.t.Helper()
	d := proctest.Start(c.t, "driver", c.driver, []string{"--peers", strings.Join(peers, ","), "--expect", fmt.Sprint(expect),
		"--scopes", fmt.Sprint(scopes), "--workers", fmt.Sprint(workers), "--prefix", prefix,
		"--timeout", requestTimeout.String(), "--health-interval", healthInterval.String()})
	d.WaitLine(0, regexp.MustCompile(`"ev":"ready"`), 60*time.Second)
	return d
}

// op is one line of the driver's report (see the driver's Op).
type op struct {
	Ev      string `json:"ev"`
	Scope   string `json:"scope"`
	Owner   string `json:"owner"`
	Req     string `json:"req"`
	Kind    string `json:"kind"`
	Handle  string `json:"handle"`
	Frame   string `json:"frame"`
	Attempt int    `json:"attempt"`
	T0      int64  `json:"t0"`
	T1      int64  `json:"t1"`
	Res     string `json:"res"`
	Err     string `json:"err"`
}

// logLine is a slog JSON line of the driver (member up/down).
type logLine struct {
	Time   time.Time `json:"time"`
	Msg    string    `json:"msg"`
	Member string    `json:"member"`
}

// report parses the driver's output incrementally.
type report struct {
	n    int
	ops  []op
	logs []logLine
}

func (r *report) feed(lines []string) {
	for ; r.n < len(lines); r.n++ {
		l := lines[r.n]
		if !strings.HasPrefix(l, "{") {
			continue
		}
		if strings.HasPrefix(l, `{"ev":"op"`) {
			var o op
			if json.Unmarshal([]byte(l), &o) == nil {
				r.ops = append(r.ops, o)
			}
			continue
		}
		var ll logLine
		if json.Unmarshal([]byte(l), &ll) == nil && ll.Msg != "" {
			r.logs = append(r.logs, ll)
		}
	}
}

// memberEvent returns the time of the first driver log line msg about
// member at or after since.
func (r *report) memberEvent(msg, member string, since time.Time) (time.Time, bool) {
	for _, l := range r.logs {
		if strings.Contains(l.Msg, msg) && l.Member == member && !l.Time.Before(since) {
			return l.Time, true
		}
	}
	return time.Time{}, false
}

// waitAcks waits until n requests sent at or after since are
// acknowledged, on scopes owner served (any owner if ""). It counts each
// new line once (the driver prints thousands).
func waitAcks(d *proctest.Proc, rep *report, what, owner string, since time.Time, n int) {
	count, next := 0, len(rep.ops)
	for i := 0; i < next; i++ {
		if o := rep.ops[i]; o.Res == "ok" && (owner == "" || o.Owner == owner) && o.T0 >= since.UnixNano() {
			count++
		}
	}
	d.WaitFor(what, 60*time.Second, func(l []string) bool {
		rep.feed(l)
		for ; next < len(rep.ops); next++ {
			if o := rep.ops[next]; o.Res == "ok" && (owner == "" || o.Owner == owner) && o.T0 >= since.UnixNano() {
				count++
			}
		}
		return count >= n
	})
}

// waitMember waits until the driver logs msg ("storage member up"/"down")
// about member at or after since, and returns when.
func waitMember(d *proctest.Proc, rep *report, msg, member string, since time.Time) time.Time {
	var at time.Time
	d.WaitFor(member+": "+msg, 60*time.Second, func(l []string) bool {
		rep.feed(l)
		var ok bool
		at, ok = rep.memberEvent(msg, member, since)
		return ok
	})
	return at
}

// stopDriver asks the driver to finish and waits for it.
func stopDriver(t *testing.T, d *proctest.Proc, rep *report) {
	t.Helper()
	d.WriteLine("stop")
	done, _ := d.WaitLine(0, regexp.MustCompile(`"ev":"done"`), 60*time.Second)
	assert.Contains(t, done, `"failed":0`)
	require.NoError(t, d.Wait(30*time.Second), "the driver leaves the cluster and exits")
	rep.feed(d.Lines())
}

// acked is an acknowledged request.
type acked struct {
	scope, kind, handle, frame string
}

// checkAllAcked checks that every request the driver sent was finally
// acknowledged, once, never later than its deadline, and never with an
// error other than a retryable one; it returns them by request id.
func checkAllAcked(t *testing.T, rep *report) map[string]acked {
	t.Helper()
	out := map[string]acked{}
	seen := map[string]bool{}
	results := map[string]int{}
	for _, o := range rep.ops {
		seen[o.Req] = true
		results[o.Res]++
		if o.Res == "error" {
			t.Errorf("an error no retry can fix: %+v", o)
		}
		if took := time.Duration(o.T1 - o.T0); took > requestTimeout+slack {
			t.Errorf("answered %s after it was sent, past the caller's deadline: %+v", took, o)
		}
		if o.Res == "ok" {
			_, dup := out[o.Req]
			assert.False(t, dup, "request %s acknowledged twice by the driver", o.Req)
			out[o.Req] = acked{scope: o.Scope, kind: o.Kind, handle: o.Handle, frame: o.Frame}
		}
	}
	for req := range seen {
		if _, ok := out[req]; !ok { // (assert.Contains on a map is quadratic)
			t.Errorf("request %s was never acknowledged", req)
		}
	}
	t.Logf("requests: %d sent (%d attempts: %v), %d acknowledged", len(seen), len(rep.ops), results, len(out))
	return out
}

// checkStore reads every scope of the store and checks that every
// acknowledged request is there exactly once, that nothing else is, and
// that each scope's history replays.
func checkStore(t *testing.T, u string, want map[string]acked, scopes int) {
	t.Helper()
	ctx := context.Background()
	st, err := eventstore.OpenPostgres(ctx, u, nil)
	require.NoError(t, err)
	defer st.Close()
	found := map[string]int{}
	var names []string
	require.NoError(t, st.Streams(ctx, func(i eventstore.StreamInfo) error { names = append(names, i.Stream); return nil }))
	assert.Len(t, names, scopes, "one stream per scope driven")
	for _, scope := range names {
		handles := 0
		var v int64
		err := st.ReadStream(ctx, scope, 1, func(r eventstore.Record) error {
			v++
			require.Equal(t, v, r.Version, "%s: one linear history", scope)
			ev, err := eventstore.DecodeFrameEvent(r)
			if err != nil {
				return err
			}
			m := ev.EventMeta()
			found[m.RequestID]++
			w, ok := want[m.RequestID]
			if !assert.True(t, ok, "%s: event %s of request %q that was never acknowledged", scope, r.Type, m.RequestID) {
				return nil
			}
			assert.Equal(t, w.scope, scope)
			switch e := ev.(type) {
			case *frames.FramePushed:
				assert.Equal(t, "push", w.kind)
				assert.Equal(t, w.frame, m.Frame, "the acknowledged frame id")
			case *frames.HandleAdded:
				assert.Equal(t, "handle", w.kind)
				assert.Equal(t, w.handle, e.Handle.ID, "the acknowledged handle id")
				handles++
			default:
				t.Errorf("%s: unexpected event %s", scope, r.Type)
			}
			return nil
		})
		require.NoError(t, err)
		state, _, err := actors.LoadState(ctx, st, scope, actors.Recall{}, nil)
		require.NoError(t, err, "the scope's history replays")
		live := state.LiveFrames()
		require.Len(t, live, 1)
		assert.Len(t, live[0].Handles, handles)
	}
	lost, dup := 0, 0
	for req := range want {
		switch found[req] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	assert.Zero(t, lost, "acknowledged requests missing from the store")
	assert.Zero(t, dup, "acknowledged requests in the store more than once")
	t.Logf("store: %d acknowledged requests, lost %d, duplicated %d, in %d scopes", len(want), lost, dup, len(names))
}

// checkVerify runs `stateindex verify --store env:…`.
func (c *cluster) checkVerify() {
	c.t.Helper()
	v := proctest.Start(c.t, "verify", c.server, []string{"verify", "--store", "env:" + storeEnv}, storeEnv+"="+c.url)
	require.NoError(c.t, v.Wait(60*time.Second), "stateindex verify --store exits 0:\n%s", v.Output())
	out := v.Output()
	assert.Contains(c.t, out, "ok: postgres")
	assert.Regexp(c.t, `[1-9][0-9]* signatures verified`, out)
	c.t.Logf("verify: %s", lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// audit is what the triggers recorded.
type audit struct {
	writes       int            // records
	acquisitions int            // owner changes
	epochs       map[string]int // stream → epochs that wrote
	byWriter     map[string]int // records by writing member
	violations   int            // records written by another member than their owner, or out of epoch order
}

// checkAudit proves from the triggers' record that no scope was ever
// written by two owners at once: every record was written by the member
// that held the stream's fence when it committed, and along each stream's
// versions the epochs never go back (each epoch's records one run, by one
// member). It returns the figures.
func checkAudit(t *testing.T, u string) audit {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	a := audit{epochs: map[string]int{}, byWriter: map[string]int{}}
	rows, err := conn.Query(ctx, `SELECT stream, version, writer, coalesce(owner, ''), coalesce(epoch, 0) FROM audit_events ORDER BY stream, version`)
	require.NoError(t, err)
	var prevStream, prevWriter string
	var prevEpoch uint64
	var prevVersion int64
	var bad []string
	fail := func(format string, args ...any) {
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		} else {
			bad[9] = "…"
		}
		a.violations++
	}
	for rows.Next() {
		var stream, writer, owner string
		var version int64
		var epoch uint64
		require.NoError(t, rows.Scan(&stream, &version, &writer, &owner, &epoch))
		a.writes++
		a.byWriter[writer]++
		switch {
		case epoch == 0:
			fail("%s v%d: written by %s without an owner epoch", stream, version, writer)
		case ownerMember(owner) != writer:
			fail("%s v%d: written by %s while %s (epoch %d) owned it", stream, version, writer, owner, epoch)
		}
		if stream == prevStream {
			switch {
			case version != prevVersion+1:
				fail("%s: version %d after %d", stream, version, prevVersion)
			case epoch < prevEpoch:
				fail("%s v%d: epoch %d after epoch %d: an older owner wrote after a newer one", stream, version, epoch, prevEpoch)
			case epoch == prevEpoch && writer != prevWriter: // cannot be, with the check above; kept for clarity
				fail("%s epoch %d: written by %s and %s", stream, epoch, prevWriter, writer)
			case epoch != prevEpoch:
				a.epochs[stream]++
			}
		} else {
			a.epochs[stream]++
		}
		prevStream, prevVersion, prevEpoch, prevWriter = stream, version, epoch, writer
	}
	require.NoError(t, rows.Err())
	assert.Zero(t, a.violations, "records not written by their scope's owner at the time:\n%s", strings.Join(bad, "\n"))
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM audit_owners`).Scan(&a.acquisitions))
	return a
}

// ownerMember is the member address of an owner name (actors.OwnerName:
// the address, '#', a nonce per process).
func ownerMember(owner string) string {
	m, _, _ := strings.Cut(owner, "#")
	return m
}

// event is a moment a member failed or left, or joined (taking its share
// from the others).
type event struct {
	name   string
	at     time.Time
	member string // the member whose scopes it affects
	join   bool   // its scopes are those placed on it after the event
}

// gaps measures what an event did to the scopes: for each scope, the time
// from its last acknowledgement before the event to its first after it
// (the scope's unavailability: in steady state this is the driver's round
// through the worker's scopes, tens of milliseconds). It returns the gaps
// of the scopes the member owned at the event (the last request sent
// before it was placed on the member; for a join, the first request sent
// after it) and those of the others, sorted.
func gaps(rep *report, e event) (owned, others []time.Duration) {
	type sc struct {
		lastOK, next      int64
		before, after     string // the owner of the last request sent before the event, of the first after
		beforeAt, afterAt int64
	}
	at := e.at.UnixNano()
	by := map[string]*sc{}
	for _, o := range rep.ops {
		s := by[o.Scope]
		if s == nil {
			s = &sc{}
			by[o.Scope] = s
		}
		if o.T0 <= at && o.T0 >= s.beforeAt {
			s.before, s.beforeAt = o.Owner, o.T0
		}
		if o.T0 > at && (s.afterAt == 0 || o.T0 < s.afterAt) {
			s.after, s.afterAt = o.Owner, o.T0
		}
		if o.Res != "ok" {
			continue
		}
		if o.T1 <= at && o.T1 > s.lastOK {
			s.lastOK = o.T1
		}
		if o.T1 > at && (s.next == 0 || o.T1 < s.next) {
			s.next = o.T1
		}
	}
	for _, s := range by {
		if s.lastOK == 0 || s.next == 0 {
			continue
		}
		g := time.Duration(s.next - s.lastOK)
		if (!e.join && s.before == e.member) || (e.join && s.after == e.member) {
			owned = append(owned, g)
		} else {
			others = append(others, g)
		}
	}
	slices.Sort(owned)
	slices.Sort(others)
	return owned, others
}

// reportGaps logs each event's gaps and returns, per affected scope and
// event, the gaps of the scopes the event's member owned.
func reportGaps(t *testing.T, rep *report, events []event) []time.Duration {
	t.Helper()
	var all []time.Duration
	for _, e := range events {
		owned, others := gaps(rep, e)
		all = append(all, owned...)
		t.Logf("unavailability at %-28s its %3d scopes: p50 %6s max %6s; the other %3d: p50 %6s max %6s", e.name+":", len(owned),
			percentile(owned, 0.5).Round(time.Millisecond), percentile(owned, 1).Round(time.Millisecond),
			len(others), percentile(others, 0.5).Round(time.Millisecond), percentile(others, 1).Round(time.Millisecond))
	}
	slices.Sort(all)
	return all
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(p*float64(len(d))))]
}
