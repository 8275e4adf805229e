package actors_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

// BenchmarkAwaitParked parks 10,000 waits — on 100 frames of 100 scopes,
// 100 waits each, sent raw (Do, no goroutine per wait: each answer lands
// in a future's channel) — and reports the heap and goroutines they cost
// and, per frame, the latency from the pop's send to each wait's answer.
func BenchmarkAwaitParked(b *testing.B) {
	const frames_, per = 100, 100
	for i := 0; i < b.N; i++ {
		func() {
			e := newEnv(&testing.T{})
			defer os.RemoveAll(e.dir)
			defer e.stop()
			c := e.c
			ids := make([]string, frames_)
			for f := range ids {
				r, err := c.PushFrame(ctx, &messages.PushFrame{Header: mut(fmt.Sprintf("s%d", f)), Goal: "g", Budget: budget.TokenBudget{Total: 10}})
				require.NoError(b, err)
				ids[f] = r.FrameID
			}
			sys := e.sys
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			g0 := runtime.NumGoroutine()
			futs := make([][]*actorFuture, frames_)
			for f := range ids {
				for j := 0; j < per; j++ {
					futs[f] = append(futs[f], request(sys, e.srv, &messages.AwaitFrame{Header: messages.Header{Scope: fmt.Sprintf("s%d", f)}, FrameID: ids[f], Wait: time.Minute}))
				}
			}
			for e.srv.ParkedAwaits() < frames_*per {
				runtime.Gosched()
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			g1 := runtime.NumGoroutine()
			b.ReportMetric(float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/float64(frames_*per), "heap-B/waiter")
			b.ReportMetric(float64(g1-g0), "goroutines-delta")
			var lat []time.Duration
			for f := range ids {
				start := time.Now()
				_, err := c.PopFrame(ctx, &messages.PopFrame{Header: mut(fmt.Sprintf("s%d", f)), FrameID: ids[f], Status: frames.StatusCompleted})
				require.NoError(b, err)
				for _, ft := range futs[f] {
					r, err := ft.Result()
					require.NoError(b, err)
					require.True(b, r.(*messages.AwaitFrameReply).Terminal)
					lat = append(lat, ft.at.Sub(start))
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "wake-p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "wake-p99-µs")
		}()
	}
}

// actorFuture is a process that keeps the one message it receives and
// when it arrived: no goroutine, no timer.
type actorFuture struct {
	done chan struct{}
	msg  any
	at   time.Time
}

func (f *actorFuture) SendUserMessage(_ *actor.PID, m any) {
	f.at = time.Now()
	_, f.msg, _ = actor.UnwrapEnvelope(m)
	close(f.done)
}
func (f *actorFuture) SendSystemMessage(*actor.PID, any) {}
func (f *actorFuture) Stop(*actor.PID)                   {}

func (f *actorFuture) Result() (any, error) {
	select {
	case <-f.done:
		return f.msg, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("no answer")
	}
}

// request sends req to the server with an actorFuture as its sender.
func request(sys *actor.ActorSystem, srv *actors.Server, req messages.Request) *actorFuture {
	f := &actorFuture{done: make(chan struct{})}
	pid, _ := sys.ProcessRegistry.Add(f, "bench-await"+sys.ProcessRegistry.NextId())
	sys.Root.RequestWithCustomSender(srv.PID(), req, pid)
	return f
}
