package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText prints a report as tables.
func WriteText(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	fmt.Fprintf(w, "StateIndex bench: %s %s/%s, %d CPUs (%s), files under %s; %s, load average %s; took %.0f s (scale %g)\n",
		r.Machine.GoVersion, r.Machine.OS, r.Machine.Arch, r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Dir,
		r.Started.Format("2006-01-02 15:04 UTC"), r.Machine.LoadAvg, r.Seconds, r.Scale)
	if len(r.Durable) > 0 {
		fmt.Fprintf(w, "\nDurable PushFrame + AddContextHandle (1 push : 3 handles, ~%.0f B events), durable before every reply; journal (default) against journal=off\n", meanEvent(r.Durable))
		fmt.Fprintf(w, "(every group commit a bbolt transaction, two fsyncs). Raw: the same events straight to the store, group-committed by eventstore with no actor\n")
		fmt.Fprintf(w, "(journal on and off), and one bare bbolt transaction each. Each figure is the median of the rounds; journal and journal=off runs alternate.\n")
		p("\tactor, journal\t\t\t│\tactor, journal=off\t\t\t│\traw journal\t\t│\traw journal=off\t\t│\t1 txn/event\t\t│\tactor ÷ raw\t\tjournal ÷\tactor p50 ÷\t\n")
		p("scopes\tops/s\tp50 µs\tp99 µs\t│\tops/s\tp50 µs\tp99 µs\t│\tops/s\tp50 µs\t│\tops/s\tp50 µs\t│\tops/s\tp50 µs\t│\tjournal\toff\toff (actor)\t1-txn p50\t\n")
		for _, d := range r.Durable {
			p("%d\t%s\t%s\t%s\t│\t%s\t%s\t%s\t│\t%s\t%s\t│\t%s\t%s\t│\t%s\t%s\t│\t%.2f\t%.2f\t%.2f\t%.2f\t\n", d.Scopes,
				num(d.Actor.OpsPerSec), num(d.Actor.P50us), num(d.Actor.P99us),
				num(d.ActorOff.OpsPerSec), num(d.ActorOff.P50us), num(d.ActorOff.P99us),
				num(d.GroupCommit.OpsPerSec), num(d.GroupCommit.P50us),
				num(d.GroupCommitOff.OpsPerSec), num(d.GroupCommitOff.P50us),
				num(d.OneTxn.OpsPerSec), num(d.OneTxn.P50us),
				d.ActorOverGroupCommit, d.ActorOffOverGroupCommitOff, d.JournalOverOff, d.ActorP50OverOneTxnP50)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		ops := make([]string, 0, len(r.Durable))
		for _, d := range r.Durable {
			ops = append(ops, fmt.Sprintf("%d scope(s): %d requests per mode, %d raw one-txn events, %d rounds", d.Scopes, d.Actor.Ops, d.OneTxn.Ops, d.Rounds))
		}
		fmt.Fprintf(w, "(%s)\n", strings.Join(ops, "; "))
		for _, d := range r.Durable {
			if f := d.Fsync; f != nil {
				fmt.Fprintf(w, "Disk floor in the same rounds (median): pwrite 1 KiB into a preallocated, written file + fdatasync p50 %s µs (mean %s, p99 %s);\n",
					num(f.Overwrite.P50us), num(f.Overwrite.MeanUs), num(f.Overwrite.P99us))
				fmt.Fprintf(w, "  appending 1 KiB + fdatasync p50 %s µs (mean %s). %d scope: actor p50 (journal) − overwrite p50 = %s µs.\n",
					num(f.Append.P50us), num(f.Append.MeanUs), d.Scopes, signed(d.Actor.P50us-f.Overwrite.P50us))
			}
		}
		for _, d := range r.Durable {
			j := d.Journal
			fmt.Fprintf(w, "Journal, %d scope(s), after the last journal round's last reply: %d segment(s) of %.0f MiB = %.0f MiB on disk (bound %.0f MiB); %d records (%.1f MiB) not yet in bbolt; %s frames (fdatasyncs), %s bbolt applications.\n",
				d.Scopes, j.Segments, mb(j.SegmentBytes), mb(j.Bytes), mb(j.MaxBytes), j.Pending, mb(j.PendingBytes), count(int(j.Frames)), count(int(j.Applications)))
		}
	}
	if len(r.Assemble) > 0 {
		fmt.Fprintf(w, "\nAssembleContextPack through the actor: one frame of N handles of ~200 tokens, budget %d, sequential requests.\n", assembleBudget)
		p("handles\tpacks\tp50 µs\tp99 µs\tmean µs\tpacks/s\ttokens used\tsegments\t\n")
		for _, a := range r.Assemble {
			p("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", count(a.Handles), count(a.Pack.Ops), num(a.Pack.P50us), num(a.Pack.P99us),
				num(a.Pack.MeanUs), num(a.Pack.OpsPerSec), a.UsedTokens, a.Segments)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Resume) > 0 {
		fmt.Fprintf(w, "\nCold ResumeActor: a new store + actor system on the file (warm page cache) for each request, p50 of up to 7; the reply follows a durable actor.resumed append.\n")
		fmt.Fprintf(w, "Snapshot + tail: the snapshot the StateIndex wrote %d events before the head (the mean tail with a snapshot every %d; fewer in a\n", resumeSnapshotEvery/2, resumeSnapshotEvery)
		fmt.Fprintf(w, "short history, so that every snapshot falls at the same point of the workload's %d-operation cycle: see replayed).\n", resumeCycle)
		fmt.Fprintf(w, "Full replay: the same file with its snapshot replaced by one of an unknown format, which recovery ignores.\n")
		fmt.Fprintf(w, "bounded: one frame, handles + usage, context compacted every 50 events; growing: child frames pushed, 2 handles, usage, popped under one live root\n")
		fmt.Fprintf(w, "(a finished frame leaves the projection and the snapshot; its record is read back from the log).\n")
		fmt.Fprintf(w, "server ms: the StateIndex's RecoveryMicros (load + durable append + reply); open+start: opening the store and starting the actors, not in p50.\n")
		p("\t\t\t│\tsnapshot + tail\t\t\t│\tfull replay\t\t\t│\treplay ÷\topen+start\t\n")
		p("history\tevents\tsnapshot KB\t│\tp50 ms\tserver ms\treplayed\t│\tp50 ms\tserver ms\treplayed\t│\tsnapshot\tms\t\n")
		for _, x := range r.Resume {
			p("%s\t%s\t%.1f\t│\t%.2f\t%.2f\t%s\t│\t%.2f\t%.2f\t%s\t│\t%.1f\t%.2f\t\n", x.History, count(int(x.Events)), float64(x.SnapshotBytes)/1024,
				x.Snapshot.Call.P50us/1000, x.Snapshot.ServerP50us/1000, count(int(x.Snapshot.EventsReplayed)),
				x.Replay.Call.P50us/1000, x.Replay.ServerP50us/1000, count(int(x.Replay.EventsReplayed)),
				x.ReplayOverSnapshot, x.Snapshot.OpenP50us/1000)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Storage) > 0 {
		fmt.Fprintf(w, "\nBytes on disk per event byte: the durable workload over %d scopes (children pushed, never popped: every frame stays live), fsynced,\n", r.Storage[0].Scopes)
		fmt.Fprintf(w, "journal on (default bound), file never compacted; payload = encoded event payloads. dir: the data directory once the store closed —\n")
		fmt.Fprintf(w, "the bbolt file + its journal DATA.journal/ (journal %% = its share of dir); disk: blocks allocated (file + journal; bbolt extends the\n")
		fmt.Fprintf(w, "file ahead, sparsely); used: pages bbolt handed out; log: the pages of every bucket but the snapshots (records, sequence index,\n")
		fmt.Fprintf(w, "per-stream index, heads); free: pages freed by later commits (replaced snapshots, copy-on-write) and not reused yet.\n")
		names := bucketNames(r.Storage)
		head := "page\tevents\twrite s\tpayload MB\tdir MB\tjournal MB\tjournal %\t│\tdir ÷ payload\tfile ÷ payload\tdisk ÷ payload\tused ÷ payload\tlog ÷ payload\t│"
		for _, n := range names {
			head += "\t" + n + " MB"
		}
		p("%s\tfree MB\t\n", head)
		for _, s := range r.Storage {
			row := fmt.Sprintf("%s\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t│\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t│", pageLabel(s.PageSize), count(s.Events), s.Seconds,
				mb(s.PayloadBytes), mb(s.DirBytes), mb(s.JournalBytes), 100*s.JournalShare,
				s.Ratio, s.FileRatio, s.DiskRatio, s.UsedRatio, s.LogRatio)
			for _, n := range names {
				row += fmt.Sprintf("\t%.1f", mb(s.Buckets[n]))
			}
			p("%s\t%.1f\t\n", row, mb(s.FreeBytes))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, s := range r.Storage {
			x := s.Index
			fmt.Fprintf(w, "%s pages: the index holds %s frame ids (%.1f MB of keys + spans) and %s request ids (%.1f MB); journal: %d segment file(s).\n",
				pageLabel(s.PageSize), count(x.Frames), mb(x.FrameBytes), count(x.Requests), mb(x.RequestBytes), s.JournalSegments)
		}
	}
	if len(r.Remote) > 0 {
		fmt.Fprintf(w, "\nRemote round trips on 127.0.0.1: a StateIndex in a child process on a memory store (no fsync), a Client here; each caller on its own scope.\n")
		fmt.Fprintf(w, "echo: a trivial remote actor answering a small wire message with itself (the floor of remoting); GetStack: a %d-frame stack. Alternating rounds.\n", r.Remote[0].Frames)
		p("callers\techo ops/s\techo p50 µs\techo p99 µs\t│\tGetStack ops/s\tGetStack p50 µs\tGetStack p99 µs\t│\tGetStack ÷ echo\t\n")
		for _, x := range r.Remote {
			p("%d\t%s\t%s\t%s\t│\t%s\t%s\t%s\t│\t%.2f\t\n", x.Callers, num(x.Echo.OpsPerSec), num(x.Echo.P50us), num(x.Echo.P99us),
				num(x.GetStack.OpsPerSec), num(x.GetStack.P50us), num(x.GetStack.P99us), x.GetStackOverEcho)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if l := r.LongLived; l != nil {
		fmt.Fprintf(w, "\nLong-lived agents: %d scopes start and finish runs (7 events each) for ever on a durable store; retention keeps the last %d runs (D = 0,\n", l.Scopes, l.KeepLastN)
		fmt.Fprintf(w, "a pass every %s), the idempotency horizon is %d ms; the same without retention, in alternating pairs. Directory = data file + journal.\n", longLivedInterval, l.HorizonMs)
		p("retention\tevents\tevents/s\tdirectory at ¼ MB\tat the end MB\tend ÷ ¼\trecords removed\t\n")
		for _, x := range l.Runs {
			p("%v\t%s\t%s\t%.1f\t%.1f\t%.2f\t%s\t\n", x.Retention, count(int(x.Events)), num(x.OpsPerSec), mb(x.DirQuarterBytes), mb(x.DirEndBytes), x.Growth, count(int(x.RecordsRemoved)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "median growth with retention %.2f; median throughput with ÷ without %.2f\n", l.Growth, l.ThroughputRatio)
	}
	if len(r.Ledger) > 0 {
		fmt.Fprintf(w, "\nSpend ledger: spawners reserve on one parent frame for children in their own scopes, push them with the token, record their\n")
		fmt.Fprintf(w, "spend and pop them; the outbox settles in the parent's scope. Reserve: ReserveSpend back to back, nothing else running. Settle: a child's\n")
		fmt.Fprintf(w, "pop acknowledged → the parent's spend.settled delivered to a subscriber. Peak: the parent's largest actual + outstanding after any event.\n")
		p("spawners\treserve/s\tp50 µs\tp99 µs\t│\tspawns/s\treserve p50\tp99\t│\tsettle p50 µs\tp99 µs\t│\tchildren\trefused\tmax µ$\tpeak µ$\tactual µ$\tchildren µ$\texceeded\t\n")
		for _, x := range r.Ledger {
			p("%d\t%s\t%s\t%s\t│\t%s\t%s\t%s\t│\t%s\t%s\t│\t%s\t%s\t%d\t%d\t%d\t%d\t%v\t\n", x.Spawners,
				num(x.Reserve.OpsPerSec), num(x.Reserve.P50us), num(x.Reserve.P99us),
				num(x.Spawn.OpsPerSec), num(x.SpawnReserve.P50us), num(x.SpawnReserve.P99us),
				num(x.Settle.P50us), num(x.Settle.P99us),
				count(x.Children), count(x.Refused), x.MaxMicros, x.PeakMicros, x.ActualMicros, x.ChildrenMicros, x.Exceeded)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.State) > 0 {
		x0 := r.State[0]
		fmt.Fprintf(w, "\nScope state: durable ChangeState of one operation (%d-byte values) beside the frame operations of the same server and run, one writer\n", x0.ValueBytes)
		fmt.Fprintf(w, "per scope: set (%d keys in turn); set+ttl (a sliding TTL); push (a window of %d); frames (PushFrame/AddContextHandle 1:3, %d-byte payloads).\n", stateKeys, stateKeep, x0.ValueBytes)
		fmt.Fprintf(w, "GetState of one key: hot (scope cached, one reader per scope); cold (a server over the same file with one shard and a cache of one\n")
		fmt.Fprintf(w, "scope: every read loads its scope from its snapshot and tail; one reader). Medians of %d rounds; phase order rotates.\n", x0.Rounds)
		p("\tset\t\t\t│\tset+ttl\t\t\t│\tpush\t\t\t│\tframes\t\t\t│\t÷ frames\t\t│\tget hot\t\t│\tget cold\t\t\t\n")
		p("scopes\tops/s\tp50 µs\tp99 µs\t│\tops/s\tp50 µs\tp99 µs\t│\tops/s\tp50 µs\tp99 µs\t│\tops/s\tp50 µs\tp99 µs\t│\tset\tpush\t│\tp50 µs\tp99 µs\t│\tp50 µs\tp99 µs\tevents\t\n")
		for _, x := range r.State {
			p("%d\t%s\t%s\t%s\t│\t%s\t%s\t%s\t│\t%s\t%s\t%s\t│\t%s\t%s\t%s\t│\t%.2f\t%.2f\t│\t%s\t%s\t│\t%s\t%s\t%s\t\n", x.Scopes,
				num(x.Set.OpsPerSec), num(x.Set.P50us), num(x.Set.P99us),
				num(x.SetTTL.OpsPerSec), num(x.SetTTL.P50us), num(x.SetTTL.P99us),
				num(x.Push.OpsPerSec), num(x.Push.P50us), num(x.Push.P99us),
				num(x.Frames.OpsPerSec), num(x.Frames.P50us), num(x.Frames.P99us),
				x.SetOverFrames, x.PushOverFrames,
				num(x.GetHot.P50us), num(x.GetHot.P99us),
				num(x.GetCold.P50us), num(x.GetCold.P99us), count(x.EventsPerScope))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		ops := make([]string, 0, len(r.State))
		for _, x := range r.State {
			ops = append(ops, fmt.Sprintf("%d scope(s): %d requests per phase, %d hot and %d cold reads", x.Scopes, x.Set.Ops, x.GetHot.Ops, x.GetCold.Ops))
		}
		fmt.Fprintf(w, "(%s, over the rounds; events: a scope's at the end of a round)\n", strings.Join(ops, "; "))
		for _, x := range r.State {
			if x.GetColdSmall.Ops > 0 {
				fmt.Fprintf(w, "get cold, a scope of one key and one event (the one-scope reads alternate with it): p50 %s µs, p99 %s µs\n", num(x.GetColdSmall.P50us), num(x.GetColdSmall.P99us))
			}
		}
		for _, x := range r.State {
			fmt.Fprintf(w, "set+row, %d scope(s): a TTL that moves the scope's earliest expiry earlier (the expirer's row written first): %s ops/s, p50 %s µs, p99 %s µs (%d sets)\n",
				x.Scopes, num(x.SetTTLRow.OpsPerSec), num(x.SetTTLRow.P50us), num(x.SetTTLRow.P99us), x.SetTTLRow.Ops)
		}
	}
	if len(r.Partial) > 0 {
		x0 := r.Partial[0]
		fmt.Fprintf(w, "\nPartial output: %d streams, one RecordPartialOutput of %d bytes every %.0f ms each (%s chunks/s offered; a final chunk and a\n",
			x0.Streams, x0.ChunkBytes, x0.IntervalMs, num(x0.OfferedRate))
		fmt.Fprintf(w, "turn every %d chunks), alone and while %d agents run the durable PushFrame/AddContextHandle workload; that workload alone and\n", partialTurnChunks, partialAgents)
		fmt.Fprintf(w, "with the streams. Medians of %d alternating rounds; chunk latencies are replies, fsyncs the journal's fdatasyncs while the streams ran alone.\n", x0.Rounds)
		p("scopes\tchunks/s\tp50 µs\tp99 µs\tfsyncs/s\tchunks/fsync\t│\twith durable: chunks/s\tp50 µs\tp99 µs\t│\tdurable alone ops/s\twith streams\twith ÷ alone\t\n")
		for _, x := range r.Partial {
			p("%d\t%s\t%s\t%s\t%s\t%.1f\t│\t%s\t%s\t%s\t│\t%s\t%s\t%.2f\t\n", x.Scopes,
				num(x.Alone.OpsPerSec), num(x.Alone.P50us), num(x.Alone.P99us), num(x.FsyncsPerSec), x.ChunksPerFsync,
				num(x.WithDurable.OpsPerSec), num(x.WithDurable.P50us), num(x.WithDurable.P99us),
				num(x.Durable.OpsPerSec), num(x.DurableWith.OpsPerSec), x.DurableRatio)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Goals) > 0 {
		fmt.Fprintf(w, "\nGoals (issues 4, 10, 11, 14 and 15) that this run can judge:\n")
		if err := WriteGoals(w, r.Goals); err != nil {
			return err
		}
	}
	if len(r.Unjudged) > 0 {
		fmt.Fprintf(w, "\nGoals this run cannot judge:\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, u := range r.Unjudged {
			fmt.Fprintf(tw, "  %s\t%s\n", u.Goal, u.Why)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// WriteGoals prints goals as a table.
func WriteGoals(w io.Writer, goals []Goal) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, g := range goals {
		met := "met"
		if !g.Met {
			met = "MISSED"
		}
		fmt.Fprintf(tw, "  %s\t%s\ttarget %s\t%s\t%s\n", g.Name, g.Measured, g.Target, met, g.Note)
	}
	return tw.Flush()
}

func meanEvent(ds []DurableResult) float64 {
	var sum float64
	for _, d := range ds {
		sum += d.MeanEventBytes
	}
	return sum / float64(len(ds))
}

func bucketNames(ss []StorageResult) []string {
	var names []string
	for _, s := range ss {
		for n := range s.Buckets {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names
}

func pageLabel(n int) string {
	if n == 0 {
		return "OS"
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// signed formats a difference with its sign.
func signed(v float64) string {
	if v < 0 {
		return "−" + Num(-v)
	}
	return "+" + Num(v)
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// count formats an integer with thousands separators.
func count(n int) string { return Num(float64(n)) }

// num is Num (kept short for the tables here).
func num(v float64) string { return Num(v) }

// Num formats a figure with thousands separators and no decimals above 100,
// one decimal below (the peers module prints its table with it too).
func Num(v float64) string {
	if v < 100 && v != float64(int64(v)) {
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
