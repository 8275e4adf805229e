package upgrade

// This file is the one place that knows today's request and reply structs
// (messages) and the Client's methods. When their shapes change, update
// Build, Send and the reply conversions here; the manifest's records stay
// as they are.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// Read operations Build also accepts (never recorded as steps).
const (
	OpGetStack = "GetStack"
	OpGetFrame = "GetFrame"
)

// Build returns the request a step records. Besides the mutating
// operations it builds GetStack and GetFrame (Scope, FrameID).
func Build(s Step) (messages.Request, error) {
	mut := messages.Header{Scope: s.Scope, RequestID: s.RequestID, IfVersion: s.IfVersion, Reason: frames.Reason(s.Reason)}
	switch s.Op {
	case "PushFrame":
		r := &messages.PushFrame{Header: mut, ParentID: s.ParentID, Inputs: s.Inputs, ContextWindow: s.ContextWindow}
		if s.Goal != nil {
			r.Goal = *s.Goal
		}
		if s.Budget != nil {
			r.Budget = *s.Budget
		}
		if s.Limits != nil {
			r.Limits = *s.Limits
		}
		r.Reservation = s.Reservation
		return r, nil
	case "PopFrame":
		st, err := frames.ParseStatus(s.Status)
		if err != nil {
			return nil, err
		}
		return &messages.PopFrame{Header: mut, FrameID: s.FrameID, Status: st, Cascade: s.Cascade}, nil
	case "UpdateFrame":
		return &messages.UpdateFrame{Header: mut, FrameID: s.FrameID, Goal: s.Goal, Inputs: s.Inputs, SetInputs: s.SetInputs,
			Limits: s.Limits, ReserveDelta: s.ReserveDelta, ContextHash: s.ContextHash}, nil
	case "AddContextHandle":
		r := &messages.AddContextHandle{Header: mut, FrameID: s.FrameID, HandleID: s.HandleID, Kind: s.Kind, Role: s.Role, Content: s.Content}
		if s.Priority != nil {
			r.Priority = *s.Priority
		}
		return r, nil
	case "AddResult":
		return &messages.AddResult{Header: mut, FrameID: s.FrameID, ResultID: s.ResultID, Kind: s.Kind, Ref: s.Ref, Summary: s.Summary}, nil
	case "RecordUsage":
		r := &messages.RecordUsage{Header: mut, FrameID: s.FrameID}
		if s.Cost != nil {
			r.Cost = *s.Cost
		}
		if c := s.Calibration; c != nil {
			r.Calibration = &messages.Calibration{PackTokens: c.PackTokens, ProviderInputTokens: c.ProviderInputTokens, Counter: c.Counter}
		}
		return r, nil
	case "StartToolCall":
		return &messages.StartToolCall{Header: mut, FrameID: s.FrameID, CallID: s.CallID, Name: s.Name, Input: s.Input}, nil
	case "FinishToolCall":
		r := &messages.FinishToolCall{Header: mut, FrameID: s.FrameID, CallID: s.CallID, Call: s.Call, Output: s.Output, IsError: s.IsError}
		if s.Priority != nil {
			r.Priority = *s.Priority
		}
		return r, nil
	case "SuspendFrame":
		return &messages.SuspendFrame{Header: mut, FrameID: s.FrameID, Reason: frames.SuspendReason(s.SuspendAs), Note: s.Note, TTLMillis: s.TTLMillis}, nil
	case "ResumeFrame":
		return &messages.ResumeFrame{Header: mut, Token: s.Token}, nil
	case "CompactContext":
		r := &messages.CompactContext{Header: mut, FrameID: s.FrameID, TargetTokens: s.TargetTokens}
		if s.Strategy != nil {
			r.Strategy = messages.Strategy{Kind: s.Strategy.Kind, KeepRecent: s.Strategy.KeepRecent,
				MessageCount: s.Strategy.MessageCount, Custom: s.Strategy.Custom}
		}
		return r, nil
	case "ContinueFrame":
		return &messages.ContinueFrame{Header: mut, FrameID: s.FrameID, ResumeCeiling: s.ResumeCeiling, Summary: s.Summary}, nil
	case "ResumeChain":
		r := &messages.ResumeChain{Header: mut, ChainID: s.ChainID, Message: s.Message, ResumeCeiling: s.ResumeCeiling}
		if s.Budget != nil {
			r.Budget = *s.Budget
		}
		if s.Limits != nil {
			r.Limits = *s.Limits
		}
		return r, nil
	case "ApplyRetention":
		return &messages.ApplyRetention{Header: mut, Through: s.Through, Hash: s.Hash, Runs: s.Runs, Why: s.Why}, nil
	case "ResumeActor":
		return &messages.ResumeActor{Header: messages.Header{Scope: s.Scope, RequestID: s.RequestID}}, nil
	case "ReserveSpend":
		return &messages.ReserveSpend{Header: mut, FrameID: s.FrameID, For: s.For, Estimate: s.Estimate, Partial: s.Partial,
			LeaseMillis: s.LeaseMillis}, nil
	case "RenewReservation":
		return &messages.RenewReservation{Header: mut, Token: s.Token, ReservationID: s.ReservationID, LeaseMillis: s.LeaseMillis}, nil
	case "ReleaseReservation":
		return &messages.ReleaseReservation{Header: mut, ReservationID: s.ReservationID}, nil
	case "SettleSpend":
		return &messages.SettleSpend{Header: mut, Token: s.Token, From: s.From, FrameID: s.FrameID, Spent: s.Spent,
			Previous: s.Previous, Final: s.Final, Proof: s.Proof}, nil
	case "AckSettlement":
		return &messages.AckSettlement{Header: mut, ReservationID: s.ReservationID, Through: s.Through, Final: s.Final, Proof: s.Proof}, nil
	case OpGetStack:
		return &messages.GetStack{Header: messages.Header{Scope: s.Scope}, FrameID: s.FrameID}, nil
	case OpGetFrame:
		return &messages.GetFrame{Header: messages.Header{Scope: s.Scope}, FrameID: s.FrameID}, nil
	}
	return nil, fmt.Errorf("upgrade: step %d: unknown operation %q", s.N, s.Op)
}

// Send sends a request built by Build and returns its reply (also with an
// error, when the reply carries one).
func Send(ctx context.Context, c *actors.Client, req messages.Request) (messages.Reply, error) {
	return c.Do(ctx, req)
}

// Wire returns a request's msgpack encoding and the SHA-256 digest of it:
// what the writing release recorded as the request's digest.
func Wire(req messages.Request) ([]byte, string, error) {
	b, err := eventstore.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// ReplyOf reduces a reply to what a resend must reproduce.
func ReplyOf(reply messages.Reply) (Reply, error) {
	switch r := reply.(type) {
	case *messages.PushFrameReply:
		b := r.Budget
		return Reply{Version: r.Version, FrameID: r.FrameID, Depth: r.Depth, Budget: &b}, nil
	case *messages.PopFrameReply:
		return Reply{Version: r.Version, FrameID: r.FrameID, Status: r.Status.String(), Released: r.Released,
			ChargedTokens: r.ChargedTokens, Cancelled: r.Cancelled, ParentSuspension: TokenOf(r.ParentSuspension)}, nil
	case *messages.UpdateFrameReply:
		return Reply{Version: r.Version, FrameID: r.FrameID}, nil
	case *messages.AddContextHandleReply:
		return withChange(Reply{Version: r.Version, FrameID: r.FrameID, HandleID: r.HandleID, Tokens: r.Tokens}, r.ContextChange), nil
	case *messages.AddResultReply:
		return Reply{Version: r.Version, FrameID: r.FrameID, ResultID: r.ResultID}, nil
	case *messages.RecordUsageReply:
		return Reply{Version: r.Version, FrameID: r.FrameID, Suspension: TokenOf(r.Suspension)}, nil
	case *messages.StartToolCallReply:
		return Reply{Version: r.Version, FrameID: r.FrameID, CallID: r.CallID}, nil
	case *messages.FinishToolCallReply:
		return withChange(Reply{Version: r.Version, FrameID: r.FrameID, CallID: r.CallID, CallHandleID: r.CallHandleID,
			ResultHandleID: r.ResultHandleID, Tokens: r.Tokens}, r.ContextChange), nil
	case *messages.SuspensionToken:
		return Reply{Version: r.Version, FrameID: r.FrameID, Suspension: TokenOf(r)}, nil
	case *messages.ResumeFrameReply:
		return Reply{Version: r.Version, FrameID: r.FrameID}, nil
	case *messages.CompactionResult:
		return withChange(Reply{Version: r.Version, FrameID: r.FrameID, Removed: r.Removed, SummaryID: r.SummaryID}, r.ContextChange), nil
	case *messages.ContinueFrameReply:
		return withChange(Reply{Version: r.Version, FrameID: r.FrameID, From: r.From, Carried: r.Carried, InDoubt: r.InDoubt,
			SummaryID: r.SummaryID, SegmentID: r.SegmentID, TokensBefore: r.TokensBefore, TokensAfter: r.TokensAfter}, r.ContextChange), nil
	case *messages.ResumeChainReply:
		return withChange(Reply{Version: r.Version, FrameID: r.FrameID, From: r.From, Root: r.Root, ParentID: r.ParentID,
			Carried: r.Carried, MessageID: r.MessageID}, r.ContextChange), nil
	case *messages.ApplyRetentionReply:
		return Reply{Version: r.Version, Through: r.Through}, nil
	case *messages.ReserveSpendReply:
		return Reply{Version: r.Version, FrameID: r.FrameID, ReservationID: r.ReservationID, For: r.For, Amount: r.Amount,
			Ceiling: r.Ceiling, Policy: string(r.Policy), ExpiresAt: r.ExpiresAt, ReservationToken: r.Token, ReturnedIDs: r.Returned}, nil
	case *messages.RenewReservationReply:
		return Reply{Version: r.Version, ReservationID: r.ReservationID, ExpiresAt: r.ExpiresAt, ReservationToken: r.Token}, nil
	case *messages.ReleaseReservationReply:
		return Reply{Version: r.Version, ReservationID: r.ReservationID, ReturnedSpend: r.Returned}, nil
	case *messages.SettleSpendReply:
		return Reply{Version: r.Version, ReservationID: r.ReservationID, Settled: r.Settled, Charged: r.Charged,
			ChargedTo: r.ChargedTo, Routed: r.Routed, Suspension: TokenOf(r.Suspension)}, nil
	case *messages.AckSettlementReply:
		return Reply{Version: r.Version, ReservationID: r.ReservationID, Through: r.Through}, nil
	case *messages.ActorResumeState:
		out := Reply{Version: r.Version, Pending: PendingOf(r)}
		for _, f := range r.LiveFrames {
			out.Live = append(out.Live, f.ID)
		}
		return out, nil
	}
	return Reply{}, fmt.Errorf("upgrade: no reply record for %T", reply)
}

// withChange adds what a reply's context change says of a continuation
// (its pressure is left out: a resend reports it as it stands then; and
// so is a refused automatic continuation, which a resend does not repeat).
func withChange(out Reply, c messages.ContextChange) Reply {
	if c.Continued != nil {
		out.Continued = &Continuation{From: c.Continued.From, To: c.Continued.To}
	}
	return out
}

// TokenOf converts a suspension token (nil for nil).
func TokenOf(t *messages.SuspensionToken) *Token {
	if t == nil {
		return nil
	}
	out := &Token{Token: t.Token, TokenID: t.TokenID, Scope: t.Scope, FrameID: t.FrameID, Reason: string(t.Reason),
		SuspendedAt: t.SuspendedAt, ExpiresAt: t.ExpiresAt}
	if t.Limit != nil {
		v := *t.Limit
		out.Limit = &v
	}
	return out
}

// StackOf lists the frames of a GetStack reply, root first.
func StackOf(reply messages.Reply) ([]Frame, error) {
	r, ok := reply.(*messages.GetStackReply)
	if !ok {
		return nil, fmt.Errorf("upgrade: %T is not a GetStack reply", reply)
	}
	return framesOf(r.Frames), nil
}

// LiveOf lists the live frames of a ResumeActor reply, in push order.
func LiveOf(reply messages.Reply) ([]Frame, error) {
	r, ok := reply.(*messages.ActorResumeState)
	if !ok {
		return nil, fmt.Errorf("upgrade: %T is not a ResumeActor reply", reply)
	}
	return framesOf(r.LiveFrames), nil
}

// PendingOf lists a ResumeActor reply's pending work.
func PendingOf(r *messages.ActorResumeState) []Pending {
	var out []Pending
	for _, p := range r.PendingWork {
		out = append(out, Pending{FrameID: p.FrameID, Kind: string(p.Kind), ToolCallID: p.ToolCallID})
	}
	return out
}

func framesOf(fs []messages.FrameSummary) []Frame {
	var out []Frame
	for _, f := range fs {
		fr := Frame{ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status.String(), Depth: f.Depth,
			Handles: f.Handles, Results: f.Results}
		for _, c := range f.InDoubt {
			fr.InDoubt = append(fr.InDoubt, c.ID)
		}
		if f.Suspension != nil {
			fr.Suspended = string(f.Suspension.Reason)
		}
		out = append(out, fr)
	}
	return out
}

// BuildRead returns the request of a recorded read.
func BuildRead(r Read) (messages.Request, error) {
	h := messages.Header{Scope: r.Scope}
	switch r.Op {
	case "GetChain":
		return &messages.GetChain{Header: h, FrameID: r.FrameID}, nil
	case "SearchChain":
		return &messages.SearchChain{Header: h, FrameID: r.FrameID, Query: r.Query, Regex: r.Regex, Limit: r.Limit, Cursor: r.Cursor}, nil
	case "GetFrame":
		return &messages.GetFrame{Header: h, FrameID: r.FrameID, WithHandles: r.WithHandles}, nil
	case "GetLedger":
		return &messages.GetLedger{Header: h, FrameID: r.FrameID}, nil
	}
	return nil, fmt.Errorf("upgrade: unknown read %q", r.Op)
}

// ReadOf fills a read's answer from its reply.
func ReadOf(r Read, reply messages.Reply) (Read, error) {
	r.Chain, r.Search, r.Frame, r.Ledger = nil, nil, nil, nil
	switch rp := reply.(type) {
	case *messages.GetChainReply:
		c := &Chain{Root: rp.Root, Head: rp.Head}
		for _, l := range rp.Links {
			cl := ChainLink{FrameID: l.FrameID, Status: l.Status.String(), Tokens: l.Tokens, CreatedAt: l.CreatedAt,
				CompletedAt: l.CompletedAt, Version: l.Version, EndVersion: l.EndVersion, Summary: l.Summary}
			if t := l.Removed; t != nil {
				cl.Removed = &Tombstone{Through: t.Through, Hash: t.Hash, At: t.At}
			}
			c.Links = append(c.Links, cl)
		}
		r.Chain = c
	case *messages.SearchChainReply:
		s := &Search{Next: rp.Next, Links: rp.Links, Head: rp.Head}
		for _, h := range rp.Hits {
			s.Hits = append(s.Hits, Hit{FrameID: h.FrameID, ItemID: h.ItemID, Version: h.Version, Kind: h.Kind, Snippet: h.Snippet})
		}
		for _, u := range rp.Unsearched {
			s.Unsearched = append(s.Unsearched, VersionRange{From: u.From, Through: u.Through, Why: u.Why})
		}
		r.Search = s
	case *messages.GetFrameReply:
		f := rp.Frame
		if f == nil {
			return r, fmt.Errorf("upgrade: GetFrame of %s answered no frame", r.FrameID)
		}
		fs := &FrameState{ChainHead: rp.ChainHead, ID: f.ID, ParentID: f.ParentID, Goal: f.Goal, Status: f.Status.String(),
			Depth: f.Depth, Budget: f.Budget, Limits: f.Limits, Cost: f.Cost, CreatedAt: f.CreatedAt, CompletedAt: f.CompletedAt,
			ContextTokens: f.ContextTokens, ContextWindow: f.ContextWindow, ContinuedFrom: f.ContinuedFrom,
			ContinuedTo: f.ContinuedTo, ChainRoot: f.ChainRoot, Freed: f.Freed}
		for _, h := range f.Handles {
			fs.Handles = append(fs.Handles, Handle{ID: h.ID, Kind: h.Kind, Priority: h.Priority, Role: string(h.Role),
				ContentSHA256: sha256Hex(h.Content), ContentRef: h.ContentRef, Tokens: h.Tokens, Seq: h.Seq, Group: h.Group, Covers: h.Covers})
		}
		for _, res := range f.Results {
			fs.Results = append(fs.Results, res.ID)
		}
		for _, c := range f.ToolCalls {
			fs.ToolCalls = append(fs.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, StartedAt: c.StartedAt, Finished: c.Finished,
				IsError: c.IsError, Abandoned: c.Abandoned})
		}
		r.Frame = fs
	case *messages.GetLedgerReply:
		r.Ledger = LedgerOf(rp)
	default:
		return r, fmt.Errorf("upgrade: no read record for %T", reply)
	}
	return r, nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// LedgerOf reduces a GetLedger reply to its record (the scope's version
// and the server's time left out).
func LedgerOf(rp *messages.GetLedgerReply) *LedgerRead {
	l := &LedgerRead{}
	for _, f := range rp.Frames {
		row := LedgerRow{Frame: f.Frame, Parent: f.Parent, Goal: f.Goal, Finished: f.Finished, Max: f.Max, Reserved: f.Reserved,
			Reservation: f.Reservation, Outstanding: f.Outstanding, Actual: f.Actual, Late: f.Late}
		if f.Status != 0 {
			row.Status = f.Status.String()
		}
		for _, v := range f.Reservations {
			row.Reservations = append(row.Reservations, LedgerReservation{ID: v.ID, Frame: v.Frame, Path: v.Path, For: v.For,
				Amount: v.Amount, Ceiling: v.Ceiling, Estimate: v.Estimate, Policy: string(v.Policy), At: v.At, ExpiresAt: v.ExpiresAt,
				Child: v.Child, Settled: v.Settled, Late: v.Late, Returned: v.Returned, Why: v.Why, Final: v.Final, Renewals: v.Renewals})
		}
		l.Frames = append(l.Frames, row)
	}
	for _, b := range rp.Bindings {
		l.Bindings = append(l.Bindings, LedgerBinding{Reservation: b.Reservation, Scope: b.Scope, Frame: b.Frame, Token: b.Token,
			Root: b.Root, Amount: b.Amount, Ceiling: b.Ceiling, ExpiresAt: b.ExpiresAt, At: b.At, Reported: b.Reported,
			Final: b.Final, Delivered: b.Delivered, DeliveredFinal: b.DeliveredFinal})
	}
	return l
}
