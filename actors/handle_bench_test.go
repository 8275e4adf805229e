package actors

import (
	"strconv"
	"testing"

	"github.com/stateindex/stateindex/messages"
)

// BenchmarkHandle: one request through the handler alone (no actor, a
// memory store), to see what dispatching costs on the hot path: a read
// answered from the state, and a mutation decided, appended (to memory) and replied.
func BenchmarkHandle(b *testing.B) {
	b.Run("op=GetStack", func(b *testing.B) {
		s := newFuzzServer(b)
		req := &messages.GetStack{Header: messages.Header{Scope: "s"}, FrameID: "id2"}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if r := s.do(req); r.Failure() != nil {
				b.Fatal(r.Failure())
			}
		}
	})
	b.Run("op=UpdateFrame", func(b *testing.B) {
		s := newFuzzServer(b)
		hash := "h"
		ids := make([]string, b.N)
		for i := range ids {
			ids[i] = "u" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := s.do(&messages.UpdateFrame{Header: messages.Header{Scope: "s", RequestID: ids[i]}, FrameID: "id1", ContextHash: &hash})
			if r.Failure() != nil {
				b.Fatal(r.Failure())
			}
		}
	})
}
