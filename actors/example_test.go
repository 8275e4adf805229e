package actors_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/budget"
	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/messages"
)

// The README's five lines, runnable.
func Example() {
	dir, _ := os.MkdirTemp("", "stateindex-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cfg := actors.DefaultConfig()
	cfg.TokenKey = []byte("a secret key of at least 32 bytes!")
	cfg.Logger = quietSystem().Logger()

	store, _ := eventstore.Open(filepath.Join(dir, "stateindex.db"), nil)
	defer store.Close()
	srv, _ := actors.Start(actor.NewActorSystem(), store, cfg)
	defer srv.Stop()
	si := srv.Client()
	f, _ := si.PushFrame(ctx, &messages.PushFrame{Header: messages.Header{Scope: "agent-1"}, Goal: "write the report", Budget: budget.TokenBudget{Total: 8000}})
	pack, _ := si.AssembleContextPack(ctx, &messages.AssembleContextPack{Header: messages.Header{Scope: "agent-1"}, FrameID: f.FrameID, BudgetTokens: 4000})

	fmt.Println(pack.BriefContext)
	fmt.Println(pack.TokenSummary.Used <= 4000, pack.TokenSummary.CompactionLevel)
	// Output:
	// Role: agent
	// Scope: agent-1
	// Goal: write the report
	// true none
}
