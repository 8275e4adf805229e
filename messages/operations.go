package messages

// Op identifies an operation of the protocol: its index in the table of
// operations. Ops are in-process values, never sent: the wire carries an
// operation's Name.
type Op uint8

// The operations, in the order of the table (and of wire.Names).
const (
	OpPushFrame Op = iota
	OpPopFrame
	OpUpdateFrame
	OpAddContextHandle
	OpAddResult
	OpRecordUsage
	OpStartToolCall
	OpFinishToolCall
	OpAssembleContextPack
	OpSuspendFrame
	OpResumeFrame
	OpCompactContext
	OpResumeActor
	OpGetFrame
	OpGetStack
	OpApplyRetention
	OpDestroyScope
	OpSearchChain
	OpContinueFrame
	OpGetChain
	OpResumeChain
	OpAwaitFrame
	OpSubscribe
	OpReadEvents
	OpAckEvents
	OpUnsubscribe
	OpListFrames
	OpReserveSpend
	OpRenewReservation
	OpReleaseReservation
	OpSettleSpend
	OpAckSettlement
	OpGetLedger
	OpChangeState
	OpGetState
	OpRangeState
	OpStateHistory
	OpExpireState
	OpRecordPartialOutput
	OpGetScope
	OpReadScope
	// NumOps is the number of operations: every Op is below it.
	NumOps
)

// Operation is one operation of the protocol: what the wire and the
// dispatcher of package actors need to know about it.
type Operation struct {
	Op Op
	// Name and ReplyName are the wire names of the request and reply
	// types. They are wire values: never rename one; add an operation
	// instead.
	Name, ReplyName string
	// Mutates says the request appends events: it has Mut(), carries
	// a request id and is applied at most once.
	Mutates bool
	// Global says the request names no scope (its ScopeName is ""): it is
	// served by the server's service actor for the operation (subscriptions,
	// the registry), not by a scope's shard, and a cluster Client sends it
	// to every member (or to the one it names) instead of to a scope's home.
	Global bool
	// NewRequest and NewReply return zero values (pointers) of the
	// request and reply types.
	NewRequest func() Request
	NewReply   func() Reply
}

// operations is the protocol table. Adding an operation means: its request
// and reply structs, its Op constant, one entry here, and an Op method on
// its request below.
var operations = [NumOps]Operation{
	OpPushFrame: {Name: "PushFrame", ReplyName: "PushFrameReply", Mutates: true,
		NewRequest: func() Request { return new(PushFrame) }, NewReply: func() Reply { return new(PushFrameReply) }},
	OpPopFrame: {Name: "PopFrame", ReplyName: "PopFrameReply", Mutates: true,
		NewRequest: func() Request { return new(PopFrame) }, NewReply: func() Reply { return new(PopFrameReply) }},
	OpUpdateFrame: {Name: "UpdateFrame", ReplyName: "UpdateFrameReply", Mutates: true,
		NewRequest: func() Request { return new(UpdateFrame) }, NewReply: func() Reply { return new(UpdateFrameReply) }},
	OpAddContextHandle: {Name: "AddContextHandle", ReplyName: "AddContextHandleReply", Mutates: true,
		NewRequest: func() Request { return new(AddContextHandle) }, NewReply: func() Reply { return new(AddContextHandleReply) }},
	OpAddResult: {Name: "AddResult", ReplyName: "AddResultReply", Mutates: true,
		NewRequest: func() Request { return new(AddResult) }, NewReply: func() Reply { return new(AddResultReply) }},
	OpRecordUsage: {Name: "RecordUsage", ReplyName: "RecordUsageReply", Mutates: true,
		NewRequest: func() Request { return new(RecordUsage) }, NewReply: func() Reply { return new(RecordUsageReply) }},
	OpStartToolCall: {Name: "StartToolCall", ReplyName: "StartToolCallReply", Mutates: true,
		NewRequest: func() Request { return new(StartToolCall) }, NewReply: func() Reply { return new(StartToolCallReply) }},
	OpFinishToolCall: {Name: "FinishToolCall", ReplyName: "FinishToolCallReply", Mutates: true,
		NewRequest: func() Request { return new(FinishToolCall) }, NewReply: func() Reply { return new(FinishToolCallReply) }},
	OpAssembleContextPack: {Name: "AssembleContextPack", ReplyName: "ContextPack",
		NewRequest: func() Request { return new(AssembleContextPack) }, NewReply: func() Reply { return new(ContextPack) }},
	OpSuspendFrame: {Name: "SuspendFrame", ReplyName: "SuspensionToken", Mutates: true,
		NewRequest: func() Request { return new(SuspendFrame) }, NewReply: func() Reply { return new(SuspensionToken) }},
	OpResumeFrame: {Name: "ResumeFrame", ReplyName: "ResumeFrameReply", Mutates: true,
		NewRequest: func() Request { return new(ResumeFrame) }, NewReply: func() Reply { return new(ResumeFrameReply) }},
	OpCompactContext: {Name: "CompactContext", ReplyName: "CompactionResult", Mutates: true,
		NewRequest: func() Request { return new(CompactContext) }, NewReply: func() Reply { return new(CompactionResult) }},
	OpResumeActor: {Name: "ResumeActor", ReplyName: "ActorResumeState", Mutates: true,
		NewRequest: func() Request { return new(ResumeActor) }, NewReply: func() Reply { return new(ActorResumeState) }},
	OpGetFrame: {Name: "GetFrame", ReplyName: "GetFrameReply",
		NewRequest: func() Request { return new(GetFrame) }, NewReply: func() Reply { return new(GetFrameReply) }},
	OpGetStack: {Name: "GetStack", ReplyName: "GetStackReply",
		NewRequest: func() Request { return new(GetStack) }, NewReply: func() Reply { return new(GetStackReply) }},
	OpApplyRetention: {Name: "ApplyRetention", ReplyName: "ApplyRetentionReply", Mutates: true,
		NewRequest: func() Request { return new(ApplyRetention) }, NewReply: func() Reply { return new(ApplyRetentionReply) }},
	OpDestroyScope: {Name: "DestroyScope", ReplyName: "DestroyScopeReply", Mutates: true,
		NewRequest: func() Request { return new(DestroyScope) }, NewReply: func() Reply { return new(DestroyScopeReply) }},
	OpSearchChain: {Name: "SearchChain", ReplyName: "SearchChainReply",
		NewRequest: func() Request { return new(SearchChain) }, NewReply: func() Reply { return new(SearchChainReply) }},
	OpContinueFrame: {Name: "ContinueFrame", ReplyName: "ContinueFrameReply", Mutates: true,
		NewRequest: func() Request { return new(ContinueFrame) }, NewReply: func() Reply { return new(ContinueFrameReply) }},
	OpGetChain: {Name: "GetChain", ReplyName: "GetChainReply",
		NewRequest: func() Request { return new(GetChain) }, NewReply: func() Reply { return new(GetChainReply) }},
	OpResumeChain: {Name: "ResumeChain", ReplyName: "ResumeChainReply", Mutates: true,
		NewRequest: func() Request { return new(ResumeChain) }, NewReply: func() Reply { return new(ResumeChainReply) }},
	OpAwaitFrame: {Name: "AwaitFrame", ReplyName: "AwaitFrameReply",
		NewRequest: func() Request { return new(AwaitFrame) }, NewReply: func() Reply { return new(AwaitFrameReply) }},
	OpSubscribe: {Name: "Subscribe", ReplyName: "SubscribeReply", Global: true,
		NewRequest: func() Request { return new(Subscribe) }, NewReply: func() Reply { return new(SubscribeReply) }},
	OpReadEvents: {Name: "ReadEvents", ReplyName: "ReadEventsReply", Global: true,
		NewRequest: func() Request { return new(ReadEvents) }, NewReply: func() Reply { return new(ReadEventsReply) }},
	OpAckEvents: {Name: "AckEvents", ReplyName: "AckEventsReply", Global: true,
		NewRequest: func() Request { return new(AckEvents) }, NewReply: func() Reply { return new(AckEventsReply) }},
	OpUnsubscribe: {Name: "Unsubscribe", ReplyName: "UnsubscribeReply", Global: true,
		NewRequest: func() Request { return new(Unsubscribe) }, NewReply: func() Reply { return new(UnsubscribeReply) }},
	OpListFrames: {Name: "ListFrames", ReplyName: "ListFramesReply", Global: true,
		NewRequest: func() Request { return new(ListFrames) }, NewReply: func() Reply { return new(ListFramesReply) }},
	OpReserveSpend: {Name: "ReserveSpend", ReplyName: "ReserveSpendReply", Mutates: true,
		NewRequest: func() Request { return new(ReserveSpend) }, NewReply: func() Reply { return new(ReserveSpendReply) }},
	OpRenewReservation: {Name: "RenewReservation", ReplyName: "RenewReservationReply", Mutates: true,
		NewRequest: func() Request { return new(RenewReservation) }, NewReply: func() Reply { return new(RenewReservationReply) }},
	OpReleaseReservation: {Name: "ReleaseReservation", ReplyName: "ReleaseReservationReply", Mutates: true,
		NewRequest: func() Request { return new(ReleaseReservation) }, NewReply: func() Reply { return new(ReleaseReservationReply) }},
	OpSettleSpend: {Name: "SettleSpend", ReplyName: "SettleSpendReply", Mutates: true,
		NewRequest: func() Request { return new(SettleSpend) }, NewReply: func() Reply { return new(SettleSpendReply) }},
	OpAckSettlement: {Name: "AckSettlement", ReplyName: "AckSettlementReply", Mutates: true,
		NewRequest: func() Request { return new(AckSettlement) }, NewReply: func() Reply { return new(AckSettlementReply) }},
	OpGetLedger: {Name: "GetLedger", ReplyName: "GetLedgerReply",
		NewRequest: func() Request { return new(GetLedger) }, NewReply: func() Reply { return new(GetLedgerReply) }},
	OpChangeState: {Name: "ChangeState", ReplyName: "ChangeStateReply", Mutates: true,
		NewRequest: func() Request { return new(ChangeState) }, NewReply: func() Reply { return new(ChangeStateReply) }},
	OpGetState: {Name: "GetState", ReplyName: "GetStateReply",
		NewRequest: func() Request { return new(GetState) }, NewReply: func() Reply { return new(GetStateReply) }},
	OpRangeState: {Name: "RangeState", ReplyName: "RangeStateReply",
		NewRequest: func() Request { return new(RangeState) }, NewReply: func() Reply { return new(RangeStateReply) }},
	OpStateHistory: {Name: "StateHistory", ReplyName: "StateHistoryReply",
		NewRequest: func() Request { return new(StateHistory) }, NewReply: func() Reply { return new(StateHistoryReply) }},
	OpExpireState: {Name: "ExpireState", ReplyName: "ExpireStateReply", Mutates: true,
		NewRequest: func() Request { return new(ExpireState) }, NewReply: func() Reply { return new(ExpireStateReply) }},
	OpRecordPartialOutput: {Name: "RecordPartialOutput", ReplyName: "RecordPartialOutputReply", Mutates: true,
		NewRequest: func() Request { return new(RecordPartialOutput) }, NewReply: func() Reply { return new(RecordPartialOutputReply) }},
	OpGetScope: {Name: "GetScope", ReplyName: "GetScopeReply",
		NewRequest: func() Request { return new(GetScope) }, NewReply: func() Reply { return new(GetScopeReply) }},
	OpReadScope: {Name: "ReadScope", ReplyName: "ReadScopeReply",
		NewRequest: func() Request { return new(ReadScope) }, NewReply: func() Reply { return new(ReadScopeReply) }},
}

func init() {
	for i := range operations {
		operations[i].Op = Op(i)
	}
}

// IsGlobal reports whether req is of a Global operation.
func IsGlobal(req Request) bool {
	if req == nil {
		return false
	}
	op := req.Op()
	return op < NumOps && operations[op].Global
}

// Operations returns the protocol table, in Op order.
func Operations() []Operation {
	return append([]Operation(nil), operations[:]...)
}

// Operation returns op's entry, or false for a value that is no operation.
func (op Op) Operation() (Operation, bool) {
	if op >= NumOps {
		return Operation{}, false
	}
	return operations[op], true
}

// String returns the operation's wire name.
func (op Op) String() string {
	if op >= NumOps {
		return "Op(invalid)"
	}
	return operations[op].Name
}

// ReplyFor returns an empty reply of the type that answers req, or nil for
// an unknown request.
func ReplyFor(req Request) Reply {
	if req == nil {
		return nil
	}
	if op := req.Op(); op < NumOps {
		return operations[op].NewReply()
	}
	return nil
}

// The Op method of each request: the dispatcher's lookup is a method call
// and an array index, with no reflection and no allocation.

// Op returns OpPushFrame.
func (*PushFrame) Op() Op { return OpPushFrame }

// Op returns OpPopFrame.
func (*PopFrame) Op() Op { return OpPopFrame }

// Op returns OpUpdateFrame.
func (*UpdateFrame) Op() Op { return OpUpdateFrame }

// Op returns OpAddContextHandle.
func (*AddContextHandle) Op() Op { return OpAddContextHandle }

// Op returns OpAddResult.
func (*AddResult) Op() Op { return OpAddResult }

// Op returns OpRecordUsage.
func (*RecordUsage) Op() Op { return OpRecordUsage }

// Op returns OpStartToolCall.
func (*StartToolCall) Op() Op { return OpStartToolCall }

// Op returns OpFinishToolCall.
func (*FinishToolCall) Op() Op { return OpFinishToolCall }

// Op returns OpAssembleContextPack.
func (*AssembleContextPack) Op() Op { return OpAssembleContextPack }

// Op returns OpSuspendFrame.
func (*SuspendFrame) Op() Op { return OpSuspendFrame }

// Op returns OpResumeFrame.
func (*ResumeFrame) Op() Op { return OpResumeFrame }

// Op returns OpCompactContext.
func (*CompactContext) Op() Op { return OpCompactContext }

// Op returns OpResumeActor.
func (*ResumeActor) Op() Op { return OpResumeActor }

// Op returns OpGetFrame.
func (*GetFrame) Op() Op { return OpGetFrame }

// Op returns OpGetStack.
func (*GetStack) Op() Op { return OpGetStack }

// Op returns OpApplyRetention.
func (*ApplyRetention) Op() Op { return OpApplyRetention }

// Op returns OpDestroyScope.
func (*DestroyScope) Op() Op { return OpDestroyScope }

// Op returns OpContinueFrame.
func (*ContinueFrame) Op() Op { return OpContinueFrame }

// Op returns OpGetChain.
func (*GetChain) Op() Op { return OpGetChain }

// Op returns OpResumeChain.
func (*ResumeChain) Op() Op { return OpResumeChain }
