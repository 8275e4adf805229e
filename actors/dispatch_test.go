package actors

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors/wire"
	"github.com/stateindex/stateindex/messages"
)

// TestEveryOperationHasAnEntry: the protocol table (messages.Operations),
// the dispatcher's table and the wire registry stay in step — every
// operation has its Op method, an entry of the right kind, a reply type
// that answers its failures, and wire names that round-trip.
func TestEveryOperationHasAnEntry(t *testing.T) {
	ops := messages.Operations()
	require.Len(t, ops, int(messages.NumOps))
	names := map[string]bool{}
	for i, op := range ops {
		t.Run(op.Name, func(t *testing.T) {
			assert.Equal(t, messages.Op(i), op.Op, "the table is in Op order")
			req, reply := op.NewRequest(), op.NewReply()
			assert.Equal(t, op.Op, req.Op(), "%T.Op names its own row", req)
			assert.Equal(t, op.Name, op.Op.String())
			assert.Equal(t, reflect.TypeOf(reply), reflect.TypeOf(messages.ReplyFor(req)))

			d := entryFor(req)
			_, mutating := req.(messages.MutatingRequest)
			assert.Equal(t, op.Mutates, mutating, "Mutates says whether %T has a request id (Mut)", req)
			switch {
			case op.Global:
				assert.Nil(t, d, "a global operation is served by its service actor, not by a shard's dispatcher")
			case d == nil:
				t.Fatalf("no dispatcher entry for %s", op.Name)
			case op.Mutates:
				assert.NotNil(t, d.decide, "a mutation decides")
				assert.True(t, (d.reply == nil) != (d.state == nil), "a mutation's reply comes from its events or from the state, one of them")
				assert.Nil(t, d.read)
			default:
				assert.NotNil(t, d.read, "a read reads")
				assert.Nil(t, d.decide)
			}

			for _, v := range []struct {
				value any
				name  string
			}{{req, op.Name}, {reply, op.ReplyName}} {
				assert.False(t, names[v.name], "wire name %q used twice", v.name)
				names[v.name] = true
				m, err := wire.Encode(v.value, 0)
				require.NoError(t, err)
				assert.Equal(t, v.name, m.Type, "%T travels under its table name", v.value)
				env, err := m.Serialize()
				require.NoError(t, err)
				back := wire.Decode(env.(*wire.Envelope))
				require.Nil(t, back.Err)
				assert.Equal(t, v.value, back.Value)
			}
			assert.IsType(t, reply, wire.ReplyTo(op.Name))
		})
	}
}

// alien is a request of no operation of the table, and impostor one that
// claims an operation whose request type it is not: both are refused as
// bad requests, write nothing and panic nowhere.
type alien struct{ messages.Header }

func (r *alien) Mut() *messages.Header { return &r.Header }

func (*alien) Op() messages.Op { return messages.NumOps }

type impostor struct{ messages.Header }

func (r *impostor) Mut() *messages.Header { return &r.Header }

func (*impostor) Op() messages.Op { return messages.OpPushFrame }

type readImpostor struct{ messages.Header }

func (r *readImpostor) Mut() *messages.Header { return &r.Header }

func (*readImpostor) Op() messages.Op { return messages.OpGetStack }

func TestRequestsOfNoEntryAreBadRequests(t *testing.T) {
	for _, req := range []messages.Request{
		&alien{messages.Header{Scope: "s", RequestID: "a1"}},
		&impostor{messages.Header{Scope: "s", RequestID: "a2"}},
		&readImpostor{messages.Header{Scope: "s", RequestID: "a3"}},
	} {
		t.Run(reflect.TypeOf(req).Elem().Name(), func(t *testing.T) {
			s := newFuzzServer(t)
			before := s.version("s")
			reply := s.do(req)
			require.NotNil(t, reply)
			require.NotNil(t, reply.Failure())
			assert.Equal(t, messages.CodeBadRequest, reply.Failure().Code)
			assert.Contains(t, reply.Failure().Message, "unknown request")
			assert.Equal(t, before, s.version("s"), "nothing written")
		})
	}
}

// TestResumeActorKeepsItsShape: ResumeActor is a mutation answered from
// the state — nothing written on an empty scope, actor.resumed appended
// once on a scope with events, a repeat answered with the state as it
// stands, and IfVersion guarding it like every other mutation.
func TestResumeActorKeepsItsShape(t *testing.T) {
	s := newFuzzServer(t)
	resume := func(scope, id string, ifVersion *int64) messages.Reply {
		return s.do(&messages.ResumeActor{Header: messages.Header{Scope: scope, RequestID: id, IfVersion: ifVersion}})
	}

	empty := resume("empty", "e1", nil)
	require.Nil(t, empty.Failure())
	assert.Equal(t, int64(0), empty.(*messages.ActorResumeState).Version)
	assert.Equal(t, int64(0), s.version("empty"), "an empty scope gets no events")

	before := s.version("s")
	first := resume("s", "ra1", nil)
	require.Nil(t, first.Failure())
	st := first.(*messages.ActorResumeState)
	assert.Equal(t, before+1, st.Version, "actor.resumed appended")
	require.NotNil(t, st.CurrentFrame)

	again := resume("s", "ra1", nil)
	require.Nil(t, again.Failure())
	assert.Equal(t, st.Version, again.(*messages.ActorResumeState).Version)
	assert.Equal(t, before+1, s.version("s"), "a repeat appends nothing")

	stale := before
	conflict := resume("s", "ra2", &stale)
	require.NotNil(t, conflict.Failure())
	assert.Equal(t, messages.CodeVersionConflict, conflict.Failure().Code)
	assert.Equal(t, before+1, s.version("s"))
}
