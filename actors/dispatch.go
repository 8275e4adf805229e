package actors

// The dispatcher: the shell's part of every operation, one entry each.
//
// The rules live in package frames (Decide, ResolveFrame, PlanCompaction,
// AssemblePack, Recover); an entry here only translates. For a mutation it
// turns the request into a frames.Command (minting ids, counting content,
// stamping time) and the events that command appended into the reply; for a
// read it turns the scope's state into the reply. Everything around that —
// scope validation, the cold load, request ids and their horizon, the
// request digest, IfVersion, the write and its reply after the commit — is
// the same for every operation and lives once in handler.go.
//
// The files a new operation touches
//
// Before (main at 1be671d), one operation was spread over eleven places in
// eight files:
//
//	messages/messages.go        its request and reply structs; a case in ReplyFor
//	actors/wire/wire.go         two register lines (request, reply)
//	actors/handler.go           a case in handle (a read, or ResumeActor)
//	actors/commands.go          a case in command and one in replyFromEvents (a mutation)
//	actors/reads.go             a method (a read, or ResumeActor)
//	actors/client.go            a typed Client method
//	frames/commands.go          its command
//	frames/decide.go            its case in Decide
//	frames/events.go, apply.go  its events and how they fold
//
// with four type switches over every request type (handle, command,
// replyFromEvents, ReplyFor) and a registry kept by hand.
//
// After:
//
//	messages/messages.go        its request and reply structs
//	messages/operations.go      its Op, its Op method and one row of the protocol
//	                            table (ReplyFor and the wire registry derive from it)
//	frames/...                  its command, its case in Decide, its events
//	actors/dispatch.go          one entry of the table below
//	actors/client.go            its typed Client method, one line (call[*Reply])
//
// and no type switch: handle finds the entry by req.Op(), an array index.
// TestEveryOperationHasAnEntry fails until the entry exists.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stateindex/stateindex/compaction"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// opEntry is the shell's part of one operation. A mutation has decide and
// either reply or state; a read has read.
type opEntry struct {
	// decide turns a mutating request into the command frames.Decide
	// checks: frame ids resolved and defaults applied by frames, ids minted
	// and content counted here, time in hdr. A nil command without an
	// error writes nothing and answers with state (only entries with state).
	decide func(h *handler, st *frames.State, req messages.Request, hdr frames.Header) (frames.Command, error)
	// reply builds a mutation's reply from the events it appended alone,
	// so that a repeated request id gets the very same reply, rebuilt from
	// the log.
	reply func(h *handler, req messages.Request, evs []frames.Event, version int64) (messages.Reply, error)
	// state, set instead of reply, builds the reply from the scope's state
	// once the events are applied; a repeated request id gets the state as
	// it stands (ResumeActor). info is how the scope was loaded; start is
	// when handling began.
	state func(h *handler, st *frames.State, info LoadInfo, start time.Time) (messages.Reply, error)
	// read answers a read from the scope's state, or with a job that
	// reads the log (a frame that finished).
	read func(h *handler, st *frames.State, req messages.Request) outcome
	// after, when set, is store work a mutation needs once its events are
	// applied (a destroy removes the scope's history): a job run with the
	// scope held, before the reply goes out. A repeat of the request runs
	// it again, which finishes what a crash or a failure interrupted; so
	// it must be idempotent. A nil job means nothing to do.
	after func(h *handler, st *frames.State, req messages.Request, reply messages.Reply) *job
	// prepare, when set, is store work a mutation needs before it is
	// decided (ResumeChain reads its chain's finished head from the log):
	// a job, run off the shard with the scope held, whose result decide
	// finds in handler.prepared. A nil job means nothing to read.
	prepare func(h *handler, st *frames.State, req messages.Request) *job
	// count, when set, names the texts decide counts (h.count): under a
	// counter that is not the estimate they are counted off the shard's
	// goroutine first (counters.go), and decide finds their counts.
	count func(st *frames.State, req messages.Request) []string
}

// counting sets an entry's count, typed by its request R.
func counting[R messages.Request](e opEntry, texts func(st *frames.State, r R) []string) opEntry {
	e.count = func(st *frames.State, req messages.Request) []string {
		if r, ok := req.(R); ok {
			return texts(st, r)
		}
		return nil
	}
	return e
}

// withPrepare sets an entry's prepare.
func withPrepare(e opEntry, prepare func(h *handler, st *frames.State, req messages.Request) *job) opEntry {
	e.prepare = prepare
	return e
}

// entryFor returns req's entry, or nil for a request no entry handles.
func entryFor(req messages.Request) *opEntry {
	op := req.Op()
	if op >= messages.NumOps {
		return nil
	}
	d := &dispatch[op]
	if d.read == nil && d.decide == nil {
		return nil
	}
	return d
}

func errUnknown(req messages.Request) *messages.Error {
	return messages.Errorf(messages.CodeBadRequest, "unknown request %T", req)
}

// mutation makes the entry of a mutation whose reply comes from its events,
// typed by its request R.
func mutation[R messages.Request](
	decide func(h *handler, st *frames.State, r R, hdr frames.Header) (frames.Command, error),
	reply func(h *handler, r R, evs []frames.Event, res messages.Result) (messages.Reply, error),
) opEntry {
	return opEntry{
		decide: func(h *handler, st *frames.State, req messages.Request, hdr frames.Header) (frames.Command, error) {
			r, ok := req.(R)
			if !ok {
				return nil, errUnknown(req)
			}
			return decide(h, st, r, hdr)
		},
		reply: func(h *handler, req messages.Request, evs []frames.Event, version int64) (messages.Reply, error) {
			r, ok := req.(R)
			if !ok {
				return nil, errUnknown(req)
			}
			if len(evs) == 0 {
				return nil, fmt.Errorf("no events for %T", req)
			}
			return reply(h, r, evs, messages.Result{Version: version})
		},
	}
}

// read makes the entry of a read, typed by its request R.
func read[R messages.Request](read func(h *handler, st *frames.State, r R) messages.Reply) opEntry {
	return readOrJob(func(h *handler, st *frames.State, r R) outcome { return replied(read(h, st, r)) })
}

// readOrJob makes the entry of a read that may need the log, typed by its
// request R.
func readOrJob[R messages.Request](read func(h *handler, st *frames.State, r R) outcome) opEntry {
	return opEntry{read: func(h *handler, st *frames.State, req messages.Request) outcome {
		r, ok := req.(R)
		if !ok {
			return replied(failure(req, errUnknown(req)))
		}
		return read(h, st, r)
	}}
}

// first returns a mutation's first event as an E, or an error saying what
// the events start with instead.
func first[E frames.Event](req messages.Request, evs []frames.Event) (E, error) {
	e, ok := evs[0].(E)
	if !ok {
		return e, fmt.Errorf("events of %T start with %s", req, evs[0].EventType())
	}
	return e, nil
}

// frameOf is the frame a mutation's first event is about.
func frameOf(evs []frames.Event) string { return evs[0].EventMeta().Frame }

// dispatch is the table: one entry per operation of messages' protocol
// table (TestEveryOperationHasAnEntry checks both stay in step).
var dispatch [messages.NumOps]opEntry

func init() {
	dispatch = [messages.NumOps]opEntry{
		// A push with another scope's reservation binds a root here: the
		// scope's outbox row is written first (outboxPrepare).
		messages.OpPushFrame: withPrepare(mutation(
			func(h *handler, _ *frames.State, r *messages.PushFrame, hdr frames.Header) (frames.Command, error) {
				cmd := &frames.PushFrame{Header: hdr, FrameID: h.cfg.NewID(), ParentID: r.ParentID, Goal: r.Goal,
					Inputs: r.Inputs, Budget: r.Budget, Limits: r.Limits, ContextWindow: r.ContextWindow}
				if r.Reservation != "" {
					cl, err := h.reservationClaims(r.Reservation)
					if err != nil {
						return nil, err
					}
					cmd.Reservation, cmd.ReservationToken = &cl, r.Reservation
				}
				return cmd, nil
			},
			func(_ *handler, r *messages.PushFrame, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.FramePushed](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.PushFrameReply{Result: res, FrameID: frameOf(evs), Depth: e.Depth, Budget: e.Budget}, nil
			}), (*handler).outboxPrepare),

		messages.OpPopFrame: mutation(
			func(h *handler, st *frames.State, r *messages.PopFrame, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.PopFrame{Header: hdr, FrameID: id, Status: r.Status, Cascade: r.Cascade, Mint: h.mint(hdr.Now, 0)}, err
			},
			func(h *handler, _ *messages.PopFrame, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				reply := &messages.PopFrameReply{Result: res}
				for _, ev := range evs {
					switch e := ev.(type) {
					case *frames.FramePopped:
						if reply.FrameID != "" {
							reply.Cancelled = append(reply.Cancelled, reply.FrameID)
						}
						reply.FrameID, reply.Status, reply.Released, reply.ChargedTokens = e.Frame, e.Status, e.Released, e.ChargedTokens
					case *frames.FrameSuspended:
						reply.ParentSuspension = h.token(e, res.Version)
					}
				}
				return reply, nil
			}),

		messages.OpUpdateFrame: mutation(
			func(h *handler, st *frames.State, r *messages.UpdateFrame, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.UpdateFrame{Header: hdr, FrameID: id, Goal: r.Goal, Inputs: r.Inputs, SetInputs: r.SetInputs,
					Limits: r.Limits, ReserveDelta: r.ReserveDelta, ContextHash: r.ContextHash, Mint: h.mint(hdr.Now, 0)}, err
			},
			func(h *handler, _ *messages.UpdateFrame, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				return &messages.UpdateFrameReply{Result: res, FrameID: frameOf(evs), Suspension: h.suspension(evs[1:], res.Version)}, nil
			}),

		messages.OpAddContextHandle: counting(mutation(
			func(h *handler, st *frames.State, r *messages.AddContextHandle, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				if err != nil {
					return nil, err
				}
				tokens, light, err := h.count("content", r.Content)
				if err != nil {
					return nil, err
				}
				return &frames.AddContextHandle{Header: hdr, FrameID: id, Handle: frames.ContextHandle{
					ID: frames.MintIfEmpty(r.HandleID, h.cfg.NewID), Kind: frames.HandleKind(r.Kind), Priority: r.Priority,
					Role: frames.Role(r.Role), Content: r.Content, Tokens: tokens, LightTokens: light}, Continue: h.autoContinue()}, nil
			},
			func(_ *handler, r *messages.AddContextHandle, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.HandleAdded](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.AddContextHandleReply{Result: res, FrameID: frameOf(evs), HandleID: e.Handle.ID, Tokens: e.Handle.Tokens,
					ContextChange: messages.ContextChange{Continued: continued(evs)}}, nil
			}),
			func(_ *frames.State, r *messages.AddContextHandle) []string { return []string{r.Content} }),

		messages.OpAddResult: mutation(
			func(h *handler, st *frames.State, r *messages.AddResult, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.AddResult{Header: hdr, FrameID: id, Result: frames.ResultRef{ID: frames.MintIfEmpty(r.ResultID, h.cfg.NewID),
					Kind: r.Kind, Ref: r.Ref, Summary: r.Summary}}, err
			},
			func(_ *handler, r *messages.AddResult, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.ResultAdded](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.AddResultReply{Result: res, FrameID: frameOf(evs), ResultID: e.Result.ID}, nil
			}),

		messages.OpRecordUsage: mutation(
			func(h *handler, st *frames.State, r *messages.RecordUsage, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.RecordUsage{Header: hdr, FrameID: id, Cost: r.Cost, Mint: h.mint(hdr.Now, 0), Calibration: calibrationSample(r.Calibration)}, err
			},
			func(h *handler, _ *messages.RecordUsage, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				return &messages.RecordUsageReply{Result: res, FrameID: frameOf(evs), Suspension: h.suspension(evs[1:], res.Version)}, nil
			}),

		messages.OpStartToolCall: mutation(
			func(h *handler, st *frames.State, r *messages.StartToolCall, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.StartToolCall{Header: hdr, FrameID: id, CallID: frames.MintIfEmpty(r.CallID, h.cfg.NewID), Name: r.Name, Input: r.Input}, err
			},
			func(_ *handler, r *messages.StartToolCall, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.ToolStarted](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.StartToolCallReply{Result: res, FrameID: frameOf(evs), CallID: e.CallID}, nil
			}),

		messages.OpFinishToolCall: counting(mutation(
			func(h *handler, st *frames.State, r *messages.FinishToolCall, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				if err != nil {
					return nil, err
				}
				call := frames.ToolCallText(st, id, r.CallID, r.Call)
				ct, cl, err := h.count("tool call", call)
				if err != nil {
					return nil, err
				}
				rt, rl, err := h.count("tool output", r.Output)
				if err != nil {
					return nil, err
				}
				prio := frames.ToolPriority(r.Priority)
				return &frames.FinishToolCall{Header: hdr, FrameID: id, CallID: r.CallID, IsError: r.IsError,
					CallHandle: frames.ContextHandle{ID: h.cfg.NewID(), Kind: frames.ToolCallKind, Role: frames.ToolCallRole, Priority: prio,
						Content: call, Tokens: ct, LightTokens: cl},
					ResultHandle: frames.ContextHandle{ID: h.cfg.NewID(), Kind: frames.ToolResultKind, Role: frames.ToolResultRole, Priority: prio,
						Content: r.Output, Tokens: rt, LightTokens: rl},
					Continue: h.autoContinue(),
				}, nil
			},
			func(_ *handler, r *messages.FinishToolCall, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.ToolFinished](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.FinishToolCallReply{Result: res, FrameID: frameOf(evs), CallID: e.CallID,
					CallHandleID: e.CallHandle.ID, ResultHandleID: e.ResultHandle.ID, Tokens: e.CallHandle.Tokens + e.ResultHandle.Tokens,
					ContextChange: messages.ContextChange{Continued: continued(evs)}}, nil
			}),
			func(st *frames.State, r *messages.FinishToolCall) []string {
				id, err := frames.ResolveFrame(st, r.FrameID)
				if err != nil {
					return nil
				}
				return []string{frames.ToolCallText(st, id, r.CallID, r.Call), r.Output}
			}),

		// A pack of a finished frame is assembled from it and its
		// ancestors as the log has them (read off the shard).
		messages.OpAssembleContextPack: readOrJob(func(h *handler, st *frames.State, r *messages.AssembleContextPack) outcome {
			var fin *frames.FinishedError
			if _, err := frames.LookupFrame(h.cfg.Frames, st, r.FrameID); errors.As(err, &fin) {
				return h.finishedJob(r, st, fin.ID, true, func(path []*frames.Frame) messages.Reply {
					return withHead(h.assemble(frames.HistoricView(st, path), r), st, fin.ID)
				})
			}
			id, _ := frames.ResolveFrame(st, r.FrameID)
			return replied(withHead(h.assemble(st, r), st, id))
		}),

		messages.OpSuspendFrame: mutation(
			func(h *handler, st *frames.State, r *messages.SuspendFrame, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				if err != nil {
					return nil, err
				}
				ttl, err := frames.SuspendTTL(r.TTLMillis, int64(h.cfg.TokenTTL), int64(h.cfg.MaxTokenTTL))
				if err != nil {
					return nil, err
				}
				return &frames.SuspendFrame{Header: hdr, FrameID: id, Reason: r.Reason, Note: r.Note, Mint: h.mint(hdr.Now, ttl)}, nil
			},
			func(h *handler, r *messages.SuspendFrame, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.FrameSuspended](r, evs)
				if err != nil {
					return nil, err
				}
				return h.token(e, res.Version), nil
			}),

		messages.OpResumeFrame: mutation(
			func(h *handler, _ *frames.State, r *messages.ResumeFrame, hdr frames.Header) (frames.Command, error) {
				c, err := parseToken(h.cfg.TokenKey, r.Token)
				if err != nil || c.Scope != r.Scope {
					// A token of another scope is as unknown as a forged one.
					return nil, messages.Errorf(messages.CodeTokenInvalid, "suspension token is malformed, forged or not of this scope")
				}
				return &frames.ResumeFrame{Header: hdr, FrameID: c.FrameID, TokenID: c.TokenID}, nil
			},
			func(_ *handler, _ *messages.ResumeFrame, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				return &messages.ResumeFrameReply{Result: res, FrameID: frameOf(evs)}, nil
			}),

		messages.OpCompactContext: mutation(
			func(h *handler, st *frames.State, r *messages.CompactContext, hdr frames.Header) (frames.Command, error) {
				s := r.Strategy
				cmd, err := frames.PlanCompaction(h.cfg.Frames, st, hdr, frames.CompactionQuery{FrameID: r.FrameID, Target: r.TargetTokens,
					Strategy: frames.StrategySpec{Kind: s.Kind, KeepRecent: s.KeepRecent, MessageCount: s.MessageCount, Custom: s.Custom},
					Custom:   h.cfg.Custom, SummaryID: h.cfg.NewID(), Counter: h.cur, Summarizer: h.cfg.Summarizer})
				if err != nil {
					return nil, err // not a typed nil in a frames.Command
				}
				return cmd, nil
			},
			func(_ *handler, r *messages.CompactContext, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.FrameCompacted](r, evs)
				if err != nil {
					return nil, err
				}
				reply := &messages.CompactionResult{Result: res, FrameID: frameOf(evs), OriginalTokens: e.OriginalTokens, FinalTokens: e.FinalTokens,
					Level: e.Level, Removed: e.Removed}
				reply.ItemsRemoved, reply.ItemsSummarized = e.Counts()
				if e.Summary != nil {
					reply.SummaryID = e.Summary.ID
				}
				return reply, nil
			}),

		// ResumeActor appends actor.resumed on a scope with events, nothing
		// on an empty one; its reply is the scope's state, also on a repeat.
		messages.OpResumeActor: {
			decide: func(h *handler, st *frames.State, _ messages.Request, hdr frames.Header) (frames.Command, error) {
				if st.Version == 0 {
					return nil, nil
				}
				seq, err := h.store.LastSeq(context.Background())
				if err != nil {
					return nil, err
				}
				return frames.Recover(st).Command(hdr, seq), nil
			},
			state: (*handler).resumeState,
		},

		// ApplyRetention: the hash it names must be the record's at
		// Through (read here: the core sees no store).
		messages.OpApplyRetention: mutation(
			func(h *handler, st *frames.State, r *messages.ApplyRetention, hdr frames.Header) (frames.Command, error) {
				if r.Through > st.RemovedThrough && r.Through <= st.Version {
					got, err := recordHash(h.store, st.Scope, r.Through)
					if err != nil {
						return nil, err
					}
					if got != r.Hash {
						return nil, messages.Errorf(messages.CodeInvalidArgument, "retention hash %q is not the hash of version %d (%s)", r.Hash, r.Through, got)
					}
				}
				return &frames.ApplyRetention{Header: hdr, Through: r.Through, Hash: r.Hash, Runs: r.Runs, Why: r.Why,
					Archive: r.Archive, ArchiveSHA256: r.ArchiveSHA256}, nil
			},
			func(_ *handler, r *messages.ApplyRetention, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.RetentionApplied](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.ApplyRetentionReply{Result: res, Through: e.Through}, nil
			}),

		// DestroyScope: one event, then (after) the scope's history removed
		// from the store through the version before it.
		messages.OpDestroyScope: func() opEntry {
			e := mutation(
				func(h *handler, st *frames.State, r *messages.DestroyScope, hdr frames.Header) (frames.Command, error) {
					var hash string
					if st.Version > 0 {
						var err error
						if hash, err = recordHash(h.store, st.Scope, st.Version); err != nil {
							return nil, err
						}
					}
					return &frames.DestroyScope{Header: hdr, Force: r.Force, Hash: hash, Why: r.Why}, nil
				},
				func(_ *handler, r *messages.DestroyScope, evs []frames.Event, res messages.Result) (messages.Reply, error) {
					e, err := first[*frames.ScopeDestroyed](r, evs)
					if err != nil {
						return nil, err
					}
					reply := &messages.DestroyScopeReply{Result: res, Through: e.Through, Cancelled: e.Cancelled, Tokens: e.Tokens}
					for _, a := range e.Abandoned {
						reply.Abandoned = append(reply.Abandoned, a.Call.ID)
					}
					return reply, nil
				})
			e.after = (*handler).removeDestroyed
			return e
		}(),

		// A finished frame is read from the log, off the shard.
		messages.OpGetFrame: readOrJob(func(h *handler, st *frames.State, r *messages.GetFrame) outcome {
			answer := func(f *frames.Frame) messages.Reply {
				c := f.Clone()
				if !r.WithHandles {
					c.Handles = nil
				}
				return &messages.GetFrameReply{Result: messages.Result{Version: st.Version}, Frame: c, ChainHead: chainHead(st, f.ID)}
			}
			f, err := frames.LookupFrame(h.cfg.Frames, st, r.FrameID)
			var fin *frames.FinishedError
			switch {
			case errors.As(err, &fin):
				return h.finishedJob(r, st, fin.ID, false, func(fs []*frames.Frame) messages.Reply { return answer(fs[0]) })
			case err != nil:
				return replied(failure(r, toWire(err)))
			}
			return replied(answer(f))
		}),

		messages.OpGetStack: readOrJob(func(h *handler, st *frames.State, r *messages.GetStack) outcome {
			answer := func(fs []*frames.Frame) messages.Reply {
				return &messages.GetStackReply{Result: messages.Result{Version: st.Version}, Frames: summaries(st, fs),
					ChainHead: chainHead(st, fs[len(fs)-1].ID)}
			}
			f, err := frames.LookupFrame(h.cfg.Frames, st, r.FrameID)
			var fin *frames.FinishedError
			switch {
			case errors.As(err, &fin):
				return h.finishedJob(r, st, fin.ID, true, answer)
			case err != nil:
				return replied(failure(r, toWire(err)))
			}
			return replied(answer(st.Ancestry(f.ID)))
		}),

		messages.OpSearchChain: readOrJob((*handler).searchChain),

		messages.OpContinueFrame: mutation(
			func(h *handler, st *frames.State, r *messages.ContinueFrame, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.ContinueFrame{Header: hdr, FrameID: id, ResumeCeiling: r.ResumeCeiling, Summary: r.Summary,
					With: h.continueWith()}, err
			},
			func(_ *handler, r *messages.ContinueFrame, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				pop, err := first[*frames.FramePopped](r, evs)
				if err != nil {
					return nil, err
				}
				if len(evs) < 3 || pop.Final == nil {
					return nil, fmt.Errorf("a continuation of %d events", len(evs))
				}
				push, ok := evs[1].(*frames.FramePushed)
				if !ok {
					return nil, fmt.Errorf("a continuation's second event is %s", evs[1].EventType())
				}
				c := carriedOf(evs[2:])
				return &messages.ContinueFrameReply{Result: res, From: pop.Frame, FrameID: push.Frame, Carried: c.n, InDoubt: len(push.InDoubt),
					SegmentID: c.segment, SummaryID: c.summary, TokensBefore: pop.Final.ContextTokens, TokensAfter: c.tokens,
					ContextChange: messages.ContextChange{Continued: &messages.Continuation{From: pop.Frame, To: push.Frame}}}, nil
			}),

		// GetChain lists a chain from its links in the state; a frame in
		// no chain is a chain of one link (a finished one read from the log).
		messages.OpGetChain: readOrJob(func(h *handler, st *frames.State, r *messages.GetChain) outcome {
			id, f, fin, err := h.lookupLink(st, r.FrameID)
			if err != nil {
				return replied(failure(r, toWire(err)))
			}
			links, root, err := st.ChainLinks(id)
			if err != nil {
				return replied(failure(r, toWire(err)))
			}
			out := &messages.GetChainReply{Result: messages.Result{Version: st.Version}, Root: root}
			for _, l := range links {
				link := messages.ChainLink{FrameID: l.ID, Status: l.Status, Tokens: l.Tokens, CreatedAt: l.CreatedAt,
					CompletedAt: l.CompletedAt, Version: l.PushSeq, EndVersion: l.EndSeq, Summary: l.Summary}
				if t := l.Removed; t != nil {
					link.Removed = &messages.ChainTombstone{Through: t.Through, Hash: t.Hash, At: t.At}
				}
				out.Links = append(out.Links, link)
			}
			one := func(f *frames.Frame) messages.Reply {
				out.Root, out.Head = f.ID, f.ID
				var tokens int64
				if !f.Status.Live() {
					tokens = f.ContextTokens
				}
				out.Links = []messages.ChainLink{{FrameID: f.ID, Status: f.Status, Tokens: tokens, CreatedAt: f.CreatedAt,
					CompletedAt: f.CompletedAt, Version: f.PushSeq}}
				return out
			}
			switch {
			case root != "":
				out.Head = links[len(links)-1].ID
				return replied(out)
			case fin != nil:
				return h.finishedJob(r, st, fin.ID, false, func(fs []*frames.Frame) messages.Reply { return one(fs[0]) })
			}
			return replied(one(f))
		}),

		// AwaitFrame: the core resolves the chain head and whether it
		// ended; an ended head's record is read from the log, a live one
		// parks the request in its shard (await.go).
		messages.OpAwaitFrame: readOrJob((*handler).await),

		// The spend ledger (frames/ledger.go has the rules; ledger.go here
		// the tokens and the outbox that delivers settlements).
		messages.OpReserveSpend: mutation(
			func(h *handler, st *frames.State, r *messages.ReserveSpend, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				if err != nil {
					return nil, err
				}
				ttl, err := frames.LeaseTTL(r.LeaseMillis, int64(h.cfg.Lease))
				if err != nil {
					return nil, err
				}
				c := &frames.ReserveSpend{Header: hdr, FrameID: id, For: r.For, Partial: r.Partial, ReservationID: h.cfg.NewID(), ExpiresAt: hdr.Now + ttl}
				if r.Estimate != nil {
					c.Estimate, c.HasEstimate = *r.Estimate, true
				}
				return c, nil
			},
			func(h *handler, r *messages.ReserveSpend, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, ok := evs[len(evs)-1].(*frames.SpendReserved)
				if !ok {
					return nil, fmt.Errorf("events of %T end with %s", r, evs[len(evs)-1].EventType())
				}
				v := e.Reservation
				reply := &messages.ReserveSpendReply{Result: res, FrameID: v.Frame, ReservationID: v.ID, For: v.For, Amount: v.Amount,
					Ceiling: v.Ceiling, Policy: v.Policy, ExpiresAt: v.ExpiresAt, Token: signReservation(h.cfg.LedgerKey, frames.ClaimsOf(e.Scope, &v))}
				if ret, ok := evs[0].(*frames.SpendReturned); ok {
					reply.Returned = ret.IDs
				}
				return reply, nil
			}),

		messages.OpRenewReservation: mutation(
			func(h *handler, st *frames.State, r *messages.RenewReservation, hdr frames.Header) (frames.Command, error) {
				id, err := h.reservationNamed(st.Scope, r.Token, r.ReservationID)
				if err != nil {
					return nil, err
				}
				ttl, err := frames.LeaseTTL(r.LeaseMillis, int64(h.cfg.Lease))
				if err != nil {
					return nil, err
				}
				return &frames.RenewReservation{Header: hdr, ReservationID: id, ExpiresAt: hdr.Now + ttl}, nil
			},
			func(h *handler, r *messages.RenewReservation, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.SpendRenewed](r, evs)
				if err != nil {
					return nil, err
				}
				cl := frames.ReservationClaims{Scope: e.Scope, Frame: e.Owner, ID: e.ID, For: e.For, Path: e.Path, Amount: e.Amount, Ceiling: e.Ceiling, ExpiresAt: e.ExpiresAt}
				return &messages.RenewReservationReply{Result: res, ReservationID: e.ID, ExpiresAt: e.ExpiresAt, Token: signReservation(h.cfg.LedgerKey, cl)}, nil
			}),

		messages.OpReleaseReservation: mutation(
			func(_ *handler, _ *frames.State, r *messages.ReleaseReservation, hdr frames.Header) (frames.Command, error) {
				return &frames.ReleaseReservation{Header: hdr, ReservationID: r.ReservationID}, nil
			},
			func(_ *handler, r *messages.ReleaseReservation, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.SpendReturned](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.ReleaseReservationReply{Result: res, ReservationID: e.IDs[0], Returned: e.Returned}, nil
			}),

		// A settlement in a scope with bindings may grow one (a late
		// charge routed to it): the outbox row is written first.
		messages.OpSettleSpend: withPrepare(mutation(
			func(h *handler, _ *frames.State, r *messages.SettleSpend, hdr frames.Header) (frames.Command, error) {
				if err := h.settlementProof(r); err != nil {
					return nil, err
				}
				cl, err := h.reservationClaims(r.Token)
				if err != nil {
					return nil, err
				}
				return &frames.SettleSpend{Header: hdr, Claims: cl, From: r.From, FrameID: r.FrameID, Spent: r.Spent, Previous: r.Previous, Final: r.Final,
					Mint: h.mint(hdr.Now, 0)}, nil
			},
			func(h *handler, r *messages.SettleSpend, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.SpendSettled](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.SettleSpendReply{Result: res, ReservationID: e.ID, Settled: e.Spent, Charged: e.Charged, ChargedTo: e.ChargedTo,
					Routed: e.Routed, Suspension: h.suspension(evs[1:], res.Version)}, nil
			}), (*handler).outboxPrepare),

		messages.OpAckSettlement: mutation(
			func(h *handler, _ *frames.State, r *messages.AckSettlement, hdr frames.Header) (frames.Command, error) {
				if err := h.ackProof(r); err != nil {
					return nil, err
				}
				return &frames.AckSettlement{Header: hdr, ReservationID: r.ReservationID, Through: r.Through, Final: r.Final}, nil
			},
			func(_ *handler, r *messages.AckSettlement, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.SpendDelivered](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.AckSettlementReply{Result: res, ReservationID: e.ID, Through: e.Through}, nil
			}),

		messages.OpGetLedger: read(func(h *handler, st *frames.State, r *messages.GetLedger) messages.Reply {
			id, now := "", h.cfg.Clock().UnixNano()
			if r.FrameID != "" {
				var err error
				if id, err = frames.ResolveFrame(st, r.FrameID); err == nil {
					err = frames.ValidateID("frame id", id, h.cfg.Frames.MaxIDBytes)
				}
				if err != nil {
					return failure(r, toWire(err))
				}
			}
			rows := frames.Ledger(st, id, now)
			// A frame this scope never had (one of another scope too) is
			// not found; a finished one answers with what the scope keeps
			// of it (its record is GetFrame's).
			if id != "" && len(rows) == 0 {
				var fin *frames.FinishedError
				if _, err := frames.LookupFrame(h.cfg.Frames, st, id); err != nil && !errors.As(err, &fin) {
					return failure(r, toWire(err))
				}
			}
			out := &messages.GetLedgerReply{Result: messages.Result{Version: st.Version}, Now: now, Frames: rows}
			for _, b := range st.Bindings {
				out.Bindings = append(out.Bindings, *b)
			}
			sort.Slice(out.Bindings, func(i, j int) bool { return out.Bindings[i].Reservation < out.Bindings[j].Reservation })
			return out
		}),

		// An inspector's reads (inspect.go): the scope as it stands, and
		// its history from its own log. Neither appends anything.
		messages.OpGetScope:  read((*handler).getScope),
		messages.OpReadScope: readOrJob((*handler).readScope),

		// Partial output (frames/partial.go has the rules): one event per
		// chunk; a busy scope's waiting chunks share one append (batch.go).
		messages.OpRecordPartialOutput: mutation(
			func(_ *handler, st *frames.State, r *messages.RecordPartialOutput, hdr frames.Header) (frames.Command, error) {
				id, err := frames.ResolveFrame(st, r.FrameID)
				return &frames.RecordPartialOutput{Header: hdr, FrameID: id, Delta: r.Delta, Percent: r.Percent, Final: r.Final, Start: r.Start}, err
			},
			func(_ *handler, r *messages.RecordPartialOutput, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.PartialOutputRecorded](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.RecordPartialOutputReply{Result: res, FrameID: frameOf(evs), Chunk: e.Chunk, Bytes: e.Bytes(),
					IsPartial: !e.Final, Percent: e.Percent}, nil
			}),

		// ResumeChain reads its chain's finished head from the log first
		// (prepare), then decides the new link.
		messages.OpResumeChain: func() opEntry {
			e := mutation(
				func(h *handler, st *frames.State, r *messages.ResumeChain, hdr frames.Header) (frames.Command, error) {
					var head *frames.Frame
					var end int64
					if p, ok := h.prepared.(*resumeHead); ok {
						head, end = p.frame, p.end
					}
					return &frames.ResumeChain{Header: hdr, ChainID: r.ChainID, Head: head, HeadEnd: end, Message: r.Message, MessageID: h.cfg.NewID(),
						Budget: r.Budget, Limits: r.Limits, ResumeCeiling: r.ResumeCeiling, With: h.continueWith()}, nil
				},
				func(_ *handler, r *messages.ResumeChain, evs []frames.Event, res messages.Result) (messages.Reply, error) {
					push, err := first[*frames.FramePushed](r, evs)
					if err != nil {
						return nil, err
					}
					if len(evs) < 3 {
						return nil, fmt.Errorf("a resume of %d events", len(evs))
					}
					c := carriedOf(evs[1 : len(evs)-1])
					msg, ok := evs[len(evs)-1].(*frames.HandleAdded)
					if !ok {
						return nil, fmt.Errorf("a resume ends with %s", evs[len(evs)-1].EventType())
					}
					return &messages.ResumeChainReply{Result: res, From: push.ContinuedFrom, FrameID: push.Frame, Root: push.ChainRoot,
						ParentID: push.ParentID, Carried: c.n, MessageID: msg.Handle.ID}, nil
				})
			e.prepare = (*handler).readChainHead
			return e
		}(),

		// Scope state (frames/kv.go; actors/state.go). A change that sets
		// a TTL writes the state expirer's row first (stateExpiryPrepare).
		messages.OpChangeState: withPrepare(mutation(
			func(_ *handler, _ *frames.State, r *messages.ChangeState, hdr frames.Header) (frames.Command, error) {
				ops, err := stateOps(r.Ops)
				return &frames.ChangeState{Header: hdr, Ops: ops}, err
			},
			func(_ *handler, r *messages.ChangeState, evs []frames.Event, res messages.Result) (messages.Reply, error) {
				e, err := first[*frames.StateChanged](r, evs)
				if err != nil {
					return nil, err
				}
				return &messages.ChangeStateReply{Result: res, Expired: len(e.Expired)}, nil
			}), (*handler).stateExpiryPrepare),

		messages.OpGetState: read(func(h *handler, st *frames.State, r *messages.GetState) messages.Reply {
			if err := frames.CheckStateLevel(st, r.FrameID, h.cfg.Frames); err != nil {
				return failure(r, toWire(err))
			}
			now := h.cfg.Clock().UnixNano()
			found, missing, err := frames.GetState(st, r.FrameID, r.Keys, now, h.cfg.Frames)
			if err != nil {
				return failure(r, toWire(err))
			}
			return &messages.GetStateReply{Result: messages.Result{Version: st.Version}, Entries: found, Missing: missing, Now: now}
		}),

		messages.OpRangeState: read(func(h *handler, st *frames.State, r *messages.RangeState) messages.Reply {
			if err := frames.CheckStateLevel(st, r.FrameID, h.cfg.Frames); err != nil {
				return failure(r, toWire(err))
			}
			limit := r.Limit
			if limit == 0 {
				limit = defaultRangeLimit
			}
			now := h.cfg.Clock().UnixNano()
			es, next, size, err := frames.RangeState(st, r.FrameID, r.Prefix, r.After, limit, now, h.cfg.Frames)
			if err != nil {
				return failure(r, toWire(err))
			}
			return &messages.RangeStateReply{Result: messages.Result{Version: st.Version}, Entries: es, Next: next, Size: size, Now: now}
		}),

		messages.OpStateHistory: readOrJob((*handler).stateHistory),

		// ExpireState decides no events when nothing has expired: it then
		// writes nothing (mutate) and answers Removed 0.
		messages.OpExpireState: opEntry{
			decide: func(_ *handler, _ *frames.State, req messages.Request, hdr frames.Header) (frames.Command, error) {
				if _, ok := req.(*messages.ExpireState); !ok {
					return nil, errUnknown(req)
				}
				return &frames.ExpireState{Header: hdr}, nil
			},
			reply: func(_ *handler, req messages.Request, evs []frames.Event, version int64) (messages.Reply, error) {
				out := &messages.ExpireStateReply{Result: messages.Result{Version: version}}
				if len(evs) > 0 {
					e, err := first[*frames.StateExpired](req, evs)
					if err != nil {
						return nil, err
					}
					out.Removed = len(e.Keys)
				}
				return out, nil
			},
		},
	}
}

// resumeHead is what ResumeChain's prepare read: the chain's finished
// head and the version of its frame.popped.
type resumeHead struct {
	frame *frames.Frame
	end   int64
}

// lookupLink resolves a frame a chain read names: a link of a chain the
// state keeps is found there (also once retention removed its records:
// its tombstone is in the chain), any other frame as LookupFrame finds it
// — live (f), or finished (fin, read from the log).
func (h *handler) lookupLink(st *frames.State, frameID string) (id string, f *frames.Frame, fin *frames.FinishedError, err error) {
	id, err = frames.ResolveFrame(st, frameID)
	if err == nil {
		err = frames.ValidateID("frame id", id, h.cfg.Frames.MaxIDBytes)
	}
	if err != nil || st.ChainOf(id) != "" {
		return id, st.Frames[id], nil, err
	}
	f, err = frames.LookupFrame(h.cfg.Frames, st, id)
	switch {
	case errors.As(err, &fin):
		return fin.ID, nil, fin, nil
	case err != nil:
		return "", nil, nil, err
	}
	return f.ID, f, nil, nil
}

// readChainHead is ResumeChain's prepare: a job that reads the finished
// head of the chain the request names off the shard, then decides the
// request with it (a live or unknown head needs no read: the core refuses
// it).
func (h *handler) readChainHead(st *frames.State, req messages.Request) *job {
	r, ok := req.(*messages.ResumeChain)
	if !ok {
		return nil
	}
	head, status, err := frames.ResolveChainHead(h.cfg.Frames, st, r.ChainID)
	if err != nil || status.Live() {
		return nil
	}
	type read struct {
		f   *frames.Frame
		end int64 // the version of its frame.popped
		pre *precount
		err error
	}
	scope := req.ScopeName()
	// The user's message is a handle added: counted here too, off the
	// shard's goroutine, under the scope's counter (not the estimate,
	// which costs nothing); its light count is kept under the light text.
	ct, name, count := h.offShardCounter(st)
	max := h.cfg.Frames.MaxContentBytes
	return &job{scope: scope,
		run: func() any {
			f, err := eventstore.LoadFinishedFrame(context.Background(), h.store, scope, head)
			rd := read{f: f, err: err}
			if err == nil {
				sp, ok, lerr := h.store.Lookup(context.Background(), scope, eventstore.FrameKey(head))
				if rd.err = lerr; ok {
					rd.end = sp.Last
				}
			}
			if count && err == nil {
				rd.pre = &precount{counter: name, texts: countTexts(ct, max, []string{r.Message})}
			}
			return rd
		},
		finish: func(v any) outcome {
			rd := v.(read)
			if rd.err != nil {
				return replied(failure(req, toWire(rd.err)))
			}
			e, ok := h.cache.Peek(scope)
			if !ok {
				return outcome{job: h.loadJob(req)}
			}
			m, _ := req.(messages.MutatingRequest)
			h.prepared = &resumeHead{frame: rd.f, end: rd.end}
			defer func() { h.prepared = nil }()
			return h.mutate(m, &dispatch[messages.OpResumeChain], e, LoadInfo{}, rd.pre)
		}}
}

// continueWith mints what a continuation needs. Its counter is the
// scope's, answering from what a job counted for the request (the user's
// message of a ResumeChain) without counting it again.
func (h *handler) continueWith() frames.ContinueWith {
	counter := h.cur
	if pre := h.pre; len(pre) > 0 && counter != nil {
		cur := counter
		counter = compaction.CounterFunc(func(s string) int64 {
			if c, ok := pre[s]; ok {
				return c.tokens
			}
			return cur.Count(s)
		})
	}
	return frames.ContinueWith{Mint: frames.ContinueMint{FrameID: h.cfg.NewID(), SegmentID: h.cfg.NewID(), SummaryID: h.cfg.NewID()},
		Counter: counter, Summarizer: h.cfg.Summarizer}
}

// autoContinue is continueWith when automatic continuation is on, else nil.
func (h *handler) autoContinue() *frames.ContinueWith {
	if h.cfg.Frames.ContinueAt <= 0 {
		return nil
	}
	w := h.continueWith()
	return &w
}

// continued names the continuation among a mutation's events, if any.
func continued(evs []frames.Event) *messages.Continuation {
	for _, ev := range evs {
		if p, ok := ev.(*frames.FramePopped); ok && p.ContinuedTo != "" {
			return &messages.Continuation{From: p.Frame, To: p.ContinuedTo}
		}
	}
	return nil
}

// carriedCounts describes the handles a new link's events add: the
// segment first, then the summary if any, then those carried over.
type carriedCounts struct {
	n                int
	segment, summary string
	tokens           int64
}

func carriedOf(evs []frames.Event) carriedCounts {
	var c carriedCounts
	for i, ev := range evs {
		e, ok := ev.(*frames.HandleAdded)
		if !ok {
			continue
		}
		c.tokens += e.Handle.Tokens
		switch {
		case i == 0 && e.Handle.Kind == frames.ContinuationKind:
			c.segment = e.Handle.ID
		case i == 1 && e.Handle.Kind == frames.SummaryKind && e.Handle.Role == frames.RoleSystem:
			c.summary = e.Handle.ID
		default:
			c.n++
		}
	}
	return c
}

// chainHead is the head of the chain id is a link of ("" for none).
func chainHead(st *frames.State, id string) string {
	if st.ChainOf(id) == "" {
		return ""
	}
	head, err := st.ChainHead(id)
	if err != nil {
		return ""
	}
	return head
}

// withHead sets a pack's ChainHead.
func withHead(r messages.Reply, st *frames.State, id string) messages.Reply {
	if p, ok := r.(*messages.ContextPack); ok && p.Err == nil {
		p.ChainHead = chainHead(st, id)
	}
	return r
}

// contextChange fills the pressure of a reply that changed a frame's
// context (the new link's after a continuation), and, for the requests
// that may continue automatically, why they did not when over the
// threshold.
func (h *handler) contextChange(st *frames.State, req messages.Request, reply messages.Reply) {
	cc, ok := reply.(messages.ContextChanger)
	if !ok || reply.Failure() != nil {
		return
	}
	ch := cc.Change()
	id := cc.PressureFrame()
	if ch.Continued != nil {
		id = ch.Continued.To
	}
	f := st.Frame(id)
	if f == nil || !f.Status.Live() {
		return
	}
	p := frames.PressureOf(h.cfg.Frames, f)
	ch.Pressure = &messages.Pressure{Tokens: p.Tokens, Window: p.Window, Permille: p.Permille}
	if op := req.Op(); ch.Continued == nil && (op == messages.OpAddContextHandle || op == messages.OpFinishToolCall) &&
		h.cfg.Frames.ContinueAt > 0 && p.Permille >= h.cfg.Frames.ContinueAt {
		ct, _, _ := h.scopeCounter(st)
		probe := frames.ContinueWith{Mint: frames.ContinueMint{FrameID: "~probe", SegmentID: "~probe-segment", SummaryID: "~probe-summary"},
			Counter: ct, Summarizer: h.cfg.Summarizer}
		ch.ContinueSkipped = frames.AutoContinueSkipped(h.cfg.Frames, st, id, probe)
	}
}

// The translations the entries share.

// recordHash is the hex hash of a scope's record at version.
func recordHash(store eventstore.Store, scope string, version int64) (string, error) {
	rec, ok, err := eventstore.ReadRecord(context.Background(), store, scope, version)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", messages.Errorf(messages.CodeInvalidArgument, "version %d of scope %q is not stored", version, scope)
	}
	return hex.EncodeToString(rec.Hash[:]), nil
}

// removeDestroyed removes a destroyed scope's history from the store: a
// snapshot of its state first (the empty scope, at or after the destroy),
// then the records before the destroy, keeping as tombstones the request
// ids within the horizon (eventstore.KeepRequestsSince), so that none is
// applied again. The destroy's own record stays, the first of the scope,
// for verify to check the removal against.
func (h *handler) removeDestroyed(st *frames.State, req messages.Request, reply messages.Reply) *job {
	r, ok := reply.(*messages.DestroyScopeReply)
	if !ok || r.Through == 0 {
		return nil
	}
	scope := st.Scope
	snap, encErr := eventstore.EncodeState(st)
	since := h.cfg.Clock().UnixNano() - st.Horizon - 2*st.Skew
	type removed struct {
		n   int64
		err error
	}
	return &job{scope: scope,
		run: func() any {
			if encErr != nil {
				return removed{err: encErr}
			}
			ctx := context.Background()
			cur, ok, err := h.store.LoadSnapshot(ctx, scope)
			if err != nil || !ok || cur.Version < snap.Version {
				if err := h.store.SaveSnapshot(ctx, scope, snap); err != nil {
					return removed{err: err}
				}
			}
			res, err := h.store.RemovePrefix(ctx, scope, r.Through, eventstore.KeepRequestsSince(since))
			return removed{res.Removed, err}
		},
		finish: func(v any) outcome {
			rm := v.(removed)
			if rm.err != nil {
				h.log.Warn("stateindex: removing a destroyed scope's history failed; resending the request or the retention pass finishes it",
					"scope", scope, "through", r.Through, "error", rm.err)
				return replied(failure(req, messages.Errorf(messages.CodeStoreFailed,
					"scope %q is destroyed (version %d), but removing its history through %d failed: %v; resend the request to finish it",
					scope, r.Version, r.Through, rm.err)))
			}
			out := *r
			out.Removed = rm.n
			return replied(&out)
		}}
}

// finishedJob reads a finished frame from the log off the shard
// (eventstore.LoadFinishedFrame) and answers with reply; with ancestors,
// reply gets its path from the root: the ancestors that finished too read
// the same way, the live ones from the state (the scope waits for the job,
// so nothing finishes meanwhile).
func (h *handler) finishedJob(req messages.Request, st *frames.State, id string, ancestors bool, reply func([]*frames.Frame) messages.Reply) outcome {
	type read struct {
		fs  []*frames.Frame // the finished part of the path, root first
		err error
	}
	scope := req.ScopeName()
	return outcome{job: &job{scope: scope,
		run: func() any {
			ctx := context.Background()
			hist := eventstore.History(h.store, scope)
			var fs []*frames.Frame
			for next := id; next != ""; {
				if len(fs) > 0 {
					if _, finished, err := hist.FinishedFrame(next); err != nil || !finished {
						return read{fs: fs, err: err}
					}
				}
				f, err := eventstore.LoadFinishedFrame(ctx, h.store, scope, next)
				if err != nil {
					return read{err: err}
				}
				fs = append([]*frames.Frame{f}, fs...)
				if next = ""; ancestors {
					next = f.ParentID
				}
			}
			return read{fs: fs}
		},
		finish: func(v any) outcome {
			r := v.(read)
			if r.err != nil {
				return replied(failure(req, toWire(r.err)))
			}
			for _, f := range r.fs { // a finished head resumed since: where its chain went
				st.LinkPointers(f)
			}
			if p := r.fs[0].ParentID; ancestors && p != "" {
				r.fs = append(st.Ancestry(p), r.fs...)
			}
			return replied(reply(r.fs))
		}}}
}

func (h *handler) mint(now int64, ttl int64) frames.Mint {
	return frames.NewMint(h.cfg.NewID(), now, frames.TokenTTL(ttl, int64(h.cfg.TokenTTL), int64(h.cfg.MaxTokenTTL)))
}

// token signs the suspension an event recorded.
func (h *handler) token(e *frames.FrameSuspended, version int64) *messages.SuspensionToken {
	s := e.Suspension
	return &messages.SuspensionToken{
		Result:  messages.Result{Version: version},
		Token:   signToken(h.cfg.TokenKey, tokenClaims{Scope: e.Scope, FrameID: e.Frame, TokenID: s.TokenID, ExpiresAt: s.ExpiresAt}),
		TokenID: s.TokenID, Scope: e.Scope, FrameID: e.Frame, Reason: s.Reason, SuspendedAt: s.At, ExpiresAt: s.ExpiresAt, Limit: s.Limit,
	}
}

// suspension is the token of the last suspension among evs, or nil.
func (h *handler) suspension(evs []frames.Event, version int64) *messages.SuspensionToken {
	var t *messages.SuspensionToken
	for _, ev := range evs {
		if e, ok := ev.(*frames.FrameSuspended); ok {
			t = h.token(e, version)
		}
	}
	return t
}

// summary describes f; its Children are its live children in st.
func summary(st *frames.State, f *frames.Frame) messages.FrameSummary {
	s := messages.FrameSummary{
		ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status, Depth: f.Depth, Budget: f.Budget,
		Limits: f.Limits, Cost: f.Cost, Handles: len(f.Handles), ContextTokens: f.ContextTokens, Results: len(f.Results),
		InDoubt: f.InDoubt(), CreatedAt: f.CreatedAt, CompletedAt: f.CompletedAt,
	}
	for _, c := range st.LiveChildren(f) {
		s.Children = append(s.Children, c.ID)
	}
	if f.Suspension != nil {
		sp := *f.Suspension
		s.Suspension = &sp
	}
	return s
}

func summaries(st *frames.State, fs []*frames.Frame) []messages.FrameSummary {
	out := make([]messages.FrameSummary, len(fs))
	for i, f := range fs {
		out[i] = summary(st, f)
	}
	return out
}

// resumeState is what an actor needs to continue: the scope's recovery
// report (frames.Recover) as it stands, with how it was loaded.
func (h *handler) resumeState(st *frames.State, info LoadInfo, start time.Time) (messages.Reply, error) {
	out := &messages.ActorResumeState{Result: messages.Result{Version: st.Version}}
	if st.Version > 0 {
		rec := frames.Recover(st)
		if rec.Current != nil {
			s := summary(st, rec.Current)
			out.CurrentFrame = &s
			out.FrameStack = summaries(st, rec.Stack)
		}
		out.LiveFrames = summaries(st, rec.Live)
		out.PendingWork = rec.Pending
		out.Outputs = rec.Outputs
		seq, err := h.store.LastSeq(context.Background())
		if err != nil {
			return nil, err
		}
		out.Recovery = messages.RecoverySummary{FramesRecovered: len(rec.Live), PendingWorkItems: len(rec.Pending), LastEventSeq: seq}
	}
	out.Recovery.FromSnapshot = info.FromSnapshot
	out.Recovery.EventsReplayed = info.Replayed
	if e, ok := h.cache.Peek(st.Scope); ok && e.st == st {
		out.Recovery.Owner, out.Recovery.Epoch = e.fence.Owner, e.fence.Epoch
	}
	out.Recovery.RecoveryMicros = time.Since(start).Microseconds()
	return out, nil
}

// MinPackBudget is the smallest budget AssembleContextPack accepts.
const MinPackBudget = frames.MinPackBudget

// assemble builds a context pack with frames.AssemblePack, reusing the
// shard's buffers, and turns it into the reply.
func (h *handler) assemble(st *frames.State, r *messages.AssembleContextPack) messages.Reply {
	// The scope's counter, which its handles were counted under: a pack
	// never mixes counters (counters.go).
	counter, name, ok := h.packCounter(st)
	if !ok {
		return failure(r, messages.Errorf(messages.CodeInternal, "scope %q is counted under %q, unknown to this server", st.Scope, name))
	}
	p, err := frames.AssemblePack(h.cfg.Frames, st, frames.PackQuery{FrameID: r.FrameID, Budget: r.BudgetTokens, Role: r.Role,
		Include: r.IncludeHandles, Exclude: r.ExcludeHandles, MinLevel: r.MinCompaction, Counter: counter, Summarizer: h.cfg.Summarizer, CounterName: name}, &h.pack)
	if err != nil {
		return failure(r, toWire(err))
	}
	crumbs := make([]messages.Breadcrumb, len(p.Breadcrumbs))
	for i, b := range p.Breadcrumbs {
		crumbs[i] = messages.Breadcrumb{FrameID: b.FrameID, Depth: b.Depth, Status: b.Status, Text: b.Text}
	}
	segs := make([]messages.Segment, len(p.Segments))
	for i, it := range p.Segments {
		segs[i] = messages.Segment{HandleID: it.ID, Kind: it.Kind, Role: it.Role, Priority: it.Priority, Content: it.Content,
			Tokens: it.Tokens, Group: it.Group, Covers: it.Covers}
	}
	meta := messages.PackMetadata{Scope: p.Scope, FrameID: p.FrameID, AssembledAt: h.cfg.Clock().UnixNano(),
		Counter: name, Recounting: h.recountingTo(st.Scope)}
	return &messages.ContextPack{
		Result:       messages.Result{Version: p.Version},
		Metadata:     meta,
		BriefContext: p.Brief,
		Breadcrumbs:  crumbs,
		Segments:     segs,
		TokenSummary: messages.TokenSummary{Budget: p.Budget, Used: p.Used, Remaining: p.EffectiveBudget - p.Used,
			Breakdown:       messages.TokenBreakdown{Brief: p.BriefTokens, Breadcrumbs: p.CrumbTokens, Segments: p.SegmentTokens},
			CompactionLevel: p.Level, Calibration: packCalibration(p.Calibration)},
		Dropped:    p.Dropped,
		Summarized: p.Summarized,
	}
}

// calibrationSample and packCalibration map calibration between the wire
// and the core.
func calibrationSample(c *messages.Calibration) *frames.CalibrationSample {
	if c == nil {
		return nil
	}
	return &frames.CalibrationSample{Counter: c.Counter, PackTokens: c.PackTokens, ProviderTokens: c.ProviderInputTokens}
}

func packCalibration(c *frames.PackCalibration) *messages.PackCalibration {
	if c == nil {
		return nil
	}
	return &messages.PackCalibration{Counter: c.Counter, Samples: c.Samples, EffectiveBudget: c.EffectiveBudget,
		MaxRatioPermille: c.MaxRatioPermille, EstimatedProviderTokens: c.EstimatedProviderTokens}
}
