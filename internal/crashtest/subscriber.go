package crashtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// A durable subscriber beside the storm: the child runs the subscription
// SubName over the storm's scopes, reading with ReadEvents from its
// acknowledged position, recording each delivered event in the
// subscription file (SubFile) and acknowledging now and then with
// AckEvents; the checker proves, after every kill, that nothing was
// skipped and the order was kept (CheckSubscriptionLog), and that the
// subscription resumes at its stored position.
//
// Subscription file lines, one write(2) each (O_APPEND; a batch's D lines
// in one write, before the ack that covers them):
//
//	S <incarnation> <position>   the child opened the subscription at position (Subscribe's reply)
//	D <seq> <scope> <version>    an event delivered (processed)
//	K <asked> <stored>           after AckEvents(asked) replied: the stored position
//	C <cycle> <stored>           the checker (after a kill) read the stored position
//
// A line cut short by the kill has no newline and is ignored.

// SubFile is the subscription file in the crash test directory.
const SubFile = "subscription.log"

// SubName is the durable subscription of the child.
const SubName = "storm"

// SubFilter is its filter: every scope of the storm.
var SubFilter = messages.EventFilter{Prefix: "crash-"}

// SubscriptionHold is the child's Config.SubscriptionHold: retention does
// not remove what the subscriber has not acknowledged (it acknowledges
// every SubAckEvery; the hold outlasts any pause between two children).
const SubscriptionHold = time.Hour

// The subscriber's pace: a read asks for at most SubBatch events and waits
// at most SubWait for one; an ack goes after SubAckEvents events or
// SubAckEvery since the last, whichever first.
const (
	SubBatch     = 128
	SubWait      = 100 * time.Millisecond
	SubAckEvents = 200
	SubAckEvery  = 30 * time.Millisecond
)

// subscriber runs the child's durable subscription until ctx ends.
func subscriber(ctx context.Context, c *actors.Client, dir string, incarnation int) error {
	log, err := OpenSideLog(filepath.Join(dir, SubFile))
	if err != nil {
		return err
	}
	defer log.Close()
	sr, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Name: SubName, Filter: SubFilter})
	if err != nil {
		return subErr(ctx, "Subscribe", err)
	}
	if err := log.write("S", strconv.Itoa(incarnation), fmt.Sprint(sr.Position)); err != nil {
		return err
	}
	pos, acked := sr.Position, sr.Position
	lastAck := time.Now()
	var buf bytes.Buffer
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, SubWait+30*time.Second)
		r, err := c.ReadEvents(rctx, "", &messages.ReadEvents{Name: SubName, From: pos, Max: SubBatch, Wait: SubWait})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, actors.ErrOverloaded) || errors.Is(err, actors.ErrTimeout) || errors.Is(err, actors.ErrUnavailable) {
				continue
			}
			return subErr(ctx, fmt.Sprintf("ReadEvents from %d", pos), err)
		}
		buf.Reset()
		for _, e := range r.Events {
			if e.Seq < pos {
				return fmt.Errorf("subscriber: ReadEvents from %d delivered seq %d", pos, e.Seq)
			}
			fmt.Fprintf(&buf, "D %d %s %d\n", e.Seq, e.Scope, e.Version)
			pos = e.Seq + 1
		}
		if buf.Len() > 0 {
			if err := log.writeRaw(buf.Bytes()); err != nil {
				return err
			}
		}
		pos = max(pos, r.Next)
		if pos > acked && (pos-acked >= SubAckEvents || time.Since(lastAck) >= SubAckEvery) {
			ar, err := c.AckEvents(ctx, "", &messages.AckEvents{Name: SubName, Position: pos})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if errors.Is(err, actors.ErrOverloaded) || errors.Is(err, actors.ErrTimeout) || errors.Is(err, actors.ErrUnavailable) {
					continue
				}
				return subErr(ctx, fmt.Sprintf("AckEvents(%d)", pos), err)
			}
			if ar.Position < pos {
				return fmt.Errorf("subscriber: AckEvents(%d) replied stored position %d", pos, ar.Position)
			}
			if err := log.write("K", fmt.Sprint(pos), fmt.Sprint(ar.Position)); err != nil {
				return err
			}
			acked, lastAck = ar.Position, time.Now()
		}
	}
	return nil
}

func subErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("subscriber %q: %s: %w", SubName, what, err)
}

// writeRaw appends whole lines in one write.
func (l *SideLog) writeRaw(b []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.f.Write(b)
	return err
}

// SubRef is one event of the log the subscription's filter matches: what
// a delivery of its seq must name.
type SubRef struct {
	Scope   string
	Version int64
	Removed bool // retention removed it from the store (it is in an archive)
}

// SubStats is what a check of the subscription found.
type SubStats struct {
	Runs        int    // children that opened the subscription
	Delivered   int    // D lines: events delivered, redeliveries included
	Unique      int    // distinct events delivered
	Redelivered int    // Delivered - Unique: after a kill, from the stored position
	Acks        int    // K lines
	LastAck     uint64 // the last K line's stored position
	Stored      uint64 // the stored position after the kill
	Covered     uint64 // every matching event below it was delivered
	Last        uint64 // the highest seq delivered
	Matching    int    // matching events in the log (archives included)
	// RemovedDelivered are delivered events retention has removed since
	// (in archives): none of them was removed before its delivery.
	RemovedDelivered int
	// Resumes are restarts whose Subscribe answered the position the
	// checker read after the kill before.
	Resumes int
}

func (s SubStats) String() string {
	return fmt.Sprintf("subscription %q: %d runs, %d events delivered (%d distinct, %d redelivered after kills), %d acks, "+
		"every one of the %d matching events below %d delivered in order (last delivered %d; %d since removed by retention), stored position %d (last recorded ack %d), %d resumes at the stored position",
		SubName, s.Runs, s.Delivered, s.Unique, s.Redelivered, s.Acks, s.Matching, s.Covered, s.Last, s.RemovedDelivered, s.Stored, s.LastAck, s.Resumes)
}

// CheckSubscriptionLog checks the subscription file's lines against the
// log's matching events (ref, by seq) and the position stored now:
//
//   - within a run (from an S line to the next), deliveries are the
//     matching events from the run's position on, each once, in seq order,
//     none skipped, each naming the scope and version the log holds at
//     its seq;
//   - a run starts at the position the checker read after the previous
//     kill (C), at or above every ack recorded before it;
//   - every ack (K) and the stored position cover only delivered events:
//     each matching event below them was delivered before;
//   - acks never go back, and the stored position is at or above the
//     last one recorded.
func CheckSubscriptionLog(log []byte, ref map[uint64]SubRef, stored uint64, storedOK bool) (SubStats, error) {
	var st SubStats
	if i := bytes.LastIndexByte(log, '\n'); i >= 0 {
		log = log[:i+1]
	} else {
		log = nil
	}
	seqs := make([]uint64, 0, len(ref))
	for q := range ref {
		seqs = append(seqs, q)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	st.Matching = len(seqs)
	delivered := map[uint64]bool{}
	frontier := 0 // seqs[frontier] is the first matching event not delivered
	covered := func() uint64 {
		for frontier < len(seqs) && delivered[seqs[frontier]] {
			frontier++
		}
		if frontier < len(seqs) {
			return seqs[frontier]
		}
		return ^uint64(0)
	}
	inRun, next := false, 0 // next: index in seqs of the run's next expected delivery
	var lastAck, checked uint64
	haveChecked := false
	for n, line := range strings.Split(strings.TrimSuffix(string(log), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s line %d %q: %s", SubFile, n+1, line, fmt.Sprintf(format, args...))
		}
		num := func(i int) (uint64, error) {
			if i >= len(f) {
				return 0, bad("malformed")
			}
			return strconv.ParseUint(f[i], 10, 64)
		}
		switch f[0] {
		case "S":
			p, err := num(2)
			if err != nil {
				return st, bad("malformed")
			}
			st.Runs++
			if haveChecked {
				if p != checked {
					return st, bad("RESUME: the subscription opened at %d, the stored position after the last kill was %d", p, checked)
				}
				st.Resumes++
			}
			if p < lastAck {
				return st, bad("RESUME: the subscription opened at %d, below the ack of %d recorded before the kill", p, lastAck)
			}
			if c := covered(); p > c {
				return st, bad("SKIPPED: the subscription opened at %d, but event %d (scope %q version %d) below it was never delivered", p, c, ref[c].Scope, ref[c].Version)
			}
			inRun, next = true, sort.Search(len(seqs), func(i int) bool { return seqs[i] >= p })
		case "D":
			q, err := num(1)
			if err != nil || len(f) != 4 {
				return st, bad("malformed")
			}
			v, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				return st, bad("malformed")
			}
			if !inRun {
				return st, bad("a delivery before the subscription was opened")
			}
			r, ok := ref[q]
			switch {
			case !ok:
				return st, bad("PHANTOM: seq %d is no event of the log the filter matches", q)
			case r.Scope != f[2] || r.Version != v:
				return st, bad("WRONG EVENT: seq %d is scope %q version %d in the log", q, r.Scope, r.Version)
			case next >= len(seqs) || seqs[next] > q:
				return st, bad("ORDER: seq %d delivered again or out of order within one run", q)
			case seqs[next] < q:
				w := seqs[next]
				return st, bad("SKIPPED: seq %d delivered, but event %d (scope %q version %d) before it was not, in this run", q, w, ref[w].Scope, ref[w].Version)
			}
			next++
			st.Delivered++
			if delivered[q] {
				st.Redelivered++
			} else {
				delivered[q] = true
				st.Unique++
				if r.Removed {
					st.RemovedDelivered++
				}
			}
			st.Last = max(st.Last, q)
		case "K":
			asked, err1 := num(1)
			p, err2 := num(2)
			if err1 != nil || err2 != nil {
				return st, bad("malformed")
			}
			if p < asked || p < lastAck {
				return st, bad("ACK: stored position %d after asking %d, the ack before stored %d", p, asked, lastAck)
			}
			if c := covered(); p > c {
				return st, bad("ACK: position %d acknowledged, but event %d (scope %q version %d) below it was never delivered", p, c, ref[c].Scope, ref[c].Version)
			}
			lastAck = p
			st.Acks++
		case "C":
			p, err := num(2)
			if err != nil {
				return st, bad("malformed")
			}
			checked, haveChecked, inRun = p, true, false
		default:
			return st, bad("malformed")
		}
	}
	st.LastAck = lastAck
	if c := covered(); st.Last >= c {
		return st, fmt.Errorf("SKIPPED: event %d (scope %q version %d) was never delivered, yet %d after it was", c, ref[c].Scope, ref[c].Version, st.Last)
	}
	st.Covered = covered()
	if st.Covered == ^uint64(0) { // every matching event delivered (or none was written yet)
		st.Covered = 0
		if len(seqs) > 0 {
			st.Covered = seqs[len(seqs)-1] + 1
		}
	}
	if !storedOK {
		if st.Runs > 0 && lastAck > 0 {
			return st, fmt.Errorf("the subscription %q is not stored, yet acks were recorded", SubName)
		}
		return st, nil
	}
	st.Stored = stored
	switch {
	case stored < lastAck:
		return st, fmt.Errorf("LOST ACK: the stored position %d is below the last recorded ack %d", stored, lastAck)
	case stored > st.Covered && len(seqs) > 0 && frontier < len(seqs):
		c := seqs[frontier]
		return st, fmt.Errorf("ACK: the stored position is %d, but event %d (scope %q version %d) below it was never delivered", stored, c, ref[c].Scope, ref[c].Version)
	}
	return st, nil
}

// storedSub is the part of the server's stored subscription record the
// checker reads (actors' subscriptions table: msgpack, position at "p").
type storedSub struct {
	Position uint64 `msgpack:"p"`
}

// checkSubscription checks the subscription after a kill (when the child
// ran one): the file against the log's matching events, every one of
// them (archived ones too: ref), and the stored position; then it opens
// the subscription as the next child will, on a server of its own, and
// reads from it: Subscribe answers the stored position, and the first
// event read is the first matching one at or after it. It records the
// stored position in the file (C), for the next child's run.
func checkSubscription(ctx context.Context, dir string, store *eventstore.BoltStore, ref map[uint64]SubRef, cycle int) (SubStats, error) {
	path := filepath.Join(dir, SubFile)
	log, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return SubStats{}, nil
	}
	if err != nil {
		return SubStats{}, err
	}
	raw, ok, err := store.TableGet(ctx, "subscriptions", []byte(SubName))
	if err != nil {
		return SubStats{}, err
	}
	var rec storedSub
	if ok {
		if err := eventstore.Unmarshal(raw, &rec); err != nil {
			return SubStats{}, fmt.Errorf("subscription %q as stored: %w", SubName, err)
		}
	}
	st, err := CheckSubscriptionLog(log, ref, rec.Position, ok)
	if err != nil {
		return st, fmt.Errorf("subscription %q after cycle %d: %w", SubName, cycle, err)
	}
	if !ok {
		return st, nil
	}
	if err := resumeSubscription(ctx, store, ref, rec.Position); err != nil {
		return st, fmt.Errorf("subscription %q after cycle %d: %w", SubName, cycle, err)
	}
	sl, err := OpenSideLog(path)
	if err != nil {
		return st, err
	}
	defer sl.Close()
	return st, sl.write("C", strconv.Itoa(cycle), fmt.Sprint(rec.Position))
}

// resumeSubscription opens the subscription on a server of its own and
// reads once from it.
func resumeSubscription(ctx context.Context, store *eventstore.BoltStore, ref map[uint64]SubRef, stored uint64) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys := quietSystem(quiet)
	defer sys.Shutdown()
	cfg := Config(quiet)
	cfg.OutboxOff = true // nothing writes before checkResume compares the replay
	cfg.StateExpiryCheck = -1
	srv, err := actors.Start(sys, store, cfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	c := srv.Client()
	sr, err := c.SubscribeOn(ctx, "", &messages.Subscribe{Name: SubName, Filter: SubFilter})
	if err != nil {
		return fmt.Errorf("reopening: %w", err)
	}
	if sr.Created || sr.Position != stored {
		return fmt.Errorf("RESUME: reopened at %d (created: %v), stored %d", sr.Position, sr.Created, stored)
	}
	r, err := c.ReadEvents(ctx, "", &messages.ReadEvents{Name: SubName, Max: 1})
	if err != nil {
		return fmt.Errorf("reading from the stored position %d: %w", stored, err)
	}
	want := uint64(0)
	for q := range ref {
		if q >= stored && (want == 0 || q < want) {
			want = q
		}
	}
	switch {
	case want == 0 && len(r.Events) > 0:
		return fmt.Errorf("RESUME: read %d from the stored position %d, past every matching event", r.Events[0].Seq, stored)
	case want != 0 && (len(r.Events) == 0 || r.Events[0].Seq != want):
		got := "nothing"
		if len(r.Events) > 0 {
			got = fmt.Sprint(r.Events[0].Seq)
		}
		return fmt.Errorf("RESUME: read %s from the stored position %d, want event %d (scope %q version %d)", got, stored, want, ref[want].Scope, ref[want].Version)
	}
	return nil
}
