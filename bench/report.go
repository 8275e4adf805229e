package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Scenario names, for Options.Only.
const (
	ScenarioDurable  = "durable"
	ScenarioAssemble = "assemble"
	ScenarioResume   = "resume"
	ScenarioStorage  = "storage"
	ScenarioRemote   = "remote"
	// ScenarioLongLived is the long-lived agents with and without retention.
	ScenarioLongLived = "longlived"
	// ScenarioLedger is agents spawning agents against one spend limit.
	ScenarioLedger = "ledger"
	// ScenarioState is scope key-value state beside the frame operations.
	ScenarioState = "state"
	// ScenarioPartial is 64 model calls streaming their output, and what
	// they cost the durable workload.
	ScenarioPartial = "partial"
)

// Scenarios lists every scenario in the order Run runs them.
var Scenarios = []string{ScenarioDurable, ScenarioAssemble, ScenarioResume, ScenarioStorage, ScenarioRemote, ScenarioLongLived, ScenarioLedger, ScenarioState, ScenarioPartial}

// Options configure Run. The zero value runs every scenario at full size
// in the system's temporary directory.
type Options struct {
	// Dir is where scenario files go (new directories under it), removed
	// afterwards unless Keep. Use a directory on the disk you mean to
	// measure: a tmpfs would measure nothing durable.
	Dir  string
	Keep bool
	// Scale multiplies every count (requests, handles, events,
	// repetitions); 0 means 1. Tests use a small scale.
	Scale float64
	// Shards overrides the StateIndex's shard count when > 0.
	Shards int
	// Rounds is how many alternating rounds (journal on, journal off) the
	// durable scenario measures each figure in; 0 means DefaultRounds.
	Rounds int
	// StorageEvents is how many events the storage scenario writes; 0
	// means DefaultStorageEvents × Scale.
	StorageEvents int
	// StoragePages are the page sizes the storage scenario runs with, in
	// bytes, 0 for the OS page; empty means both the OS page and 16 KiB.
	StoragePages []int
	// Only runs the named scenarios (see Scenarios); empty runs all.
	Only []string
	// Progress, when set, gets one line per step.
	Progress io.Writer
	// Executable is the program the remote scenario starts as its server
	// (default: this one, os.Executable). It must call ServeRemoteChild
	// first thing when IsRemoteChild.
	Executable string
}

func (o *Options) scale(n int, least int) int {
	s := o.Scale
	if s <= 0 {
		s = 1
	}
	return max(int(float64(n)*s+0.5), least)
}

// scaleFactor is Scale, 1 when unset.
func (o *Options) scaleFactor() float64 {
	if o.Scale <= 0 {
		return 1
	}
	return o.Scale
}

func (o *Options) rounds() int {
	if o.Rounds > 0 {
		return o.Rounds
	}
	return DefaultRounds
}

func (o *Options) storageEvents() int {
	if o.StorageEvents > 0 {
		return o.StorageEvents
	}
	return o.scale(DefaultStorageEvents, 32)
}

func (o *Options) rawTxnEvents() int { return o.scale(3000, 10) }

func (o *Options) runs(name string) bool { return len(o.Only) == 0 || slices.Contains(o.Only, name) }

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", args...)
	}
}

func (o *Options) cleanup(dir string) {
	if !o.Keep {
		_ = os.RemoveAll(dir)
	}
}

// Report is one run of the scenarios: every figure in it was measured in
// the same process, one scenario after another.
type Report struct {
	Machine  Machine          `json:"machine"`
	Started  time.Time        `json:"started"`
	Seconds  float64          `json:"seconds"`
	Scale    float64          `json:"scale"`
	Durable  []DurableResult  `json:"durable,omitempty"`
	Assemble []AssembleResult `json:"assemble,omitempty"`
	Resume   []ResumeResult   `json:"resume,omitempty"`
	Storage  []StorageResult  `json:"storage,omitempty"`
	Remote   []RemoteResult   `json:"remote,omitempty"`
	// LongLived is the long-lived-agent scenario (issue 11's retention).
	LongLived *LongLivedResult `json:"long_lived,omitempty"`
	// Ledger is the spend-ledger scenario (issue 14), at 1 and 64 spawners.
	Ledger []LedgerResult `json:"ledger,omitempty"`
	// State is the scope-state scenario (issue 15), at 1 and 64 scopes.
	State []StateResult `json:"state,omitempty"`
	// Partial is the partial-output scenario (issue 15): 64 streams in 64
	// scopes, and in 4.
	Partial []PartialResult `json:"partial,omitempty"`
	Goals   []Goal          `json:"goals,omitempty"`
	// Unjudged are the goals this run cannot judge, each with the reason
	// (a scenario left out by --only, or run too small by --scale).
	Unjudged []Unjudged `json:"unjudged,omitempty"`
}

// Machine identifies where a report was measured.
type Machine struct {
	GoVersion string `json:"go"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model,omitempty"`
	Dir       string `json:"dir"`
	// LoadAvg is /proc/loadavg when the run started: other work on the
	// machine skews every figure.
	LoadAvg string `json:"loadavg,omitempty"`
}

// CurrentMachine describes this process's machine; dir is where the
// scenario files go.
func CurrentMachine(dir string) Machine {
	if dir == "" {
		dir = os.TempDir()
	}
	return Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), CPUModel: cpuModel(), Dir: dir, LoadAvg: loadAvg()}
}

// loadAvg is the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Run runs the scenarios Options select and returns their figures, with
// the goals of the StateIndex side evaluated.
func Run(ctx context.Context, o Options) (*Report, error) {
	for _, name := range o.Only {
		if !slices.Contains(Scenarios, name) {
			return nil, fmt.Errorf("bench: unknown scenario %q (have %s)", name, strings.Join(Scenarios, ", "))
		}
	}
	scale := o.Scale
	if scale <= 0 {
		scale = 1
	}
	rep := &Report{Machine: CurrentMachine(o.Dir), Started: time.Now().UTC().Truncate(time.Second), Scale: scale}
	begin := time.Now()
	if o.runs(ScenarioDurable) {
		for _, c := range []struct{ scopes, ops int }{{1, 3000}, {16, 16000}, {64, 32000}} {
			r, err := durable(ctx, &o, c.scopes, o.scale(c.ops, c.scopes))
			if err != nil {
				return rep, fmt.Errorf("durable, %d scopes: %w", c.scopes, err)
			}
			rep.Durable = append(rep.Durable, r)
		}
	}
	if o.runs(ScenarioAssemble) {
		for _, c := range []struct{ handles, reps int }{{100, 3000}, {1000, 2000}, {10000, 300}} {
			r, err := assemble(ctx, &o, o.scale(c.handles, 10), o.scale(c.reps, 5), 5*time.Second)
			if err != nil {
				return rep, fmt.Errorf("assemble, %d handles: %w", c.handles, err)
			}
			rep.Assemble = append(rep.Assemble, r)
		}
	}
	if o.runs(ScenarioResume) {
		reps := 7
		if scale < 0.1 {
			reps = 3
		}
		for _, h := range []History{Bounded, Growing} {
			for _, events := range []int{1000, 10000, 100000} {
				r, err := resume(ctx, &o, h, int64(o.scale(events, 20)), reps)
				if err != nil {
					return rep, fmt.Errorf("resume, %s history of %d events: %w", h, events, err)
				}
				rep.Resume = append(rep.Resume, r)
			}
		}
	}
	if o.runs(ScenarioStorage) {
		pages := o.StoragePages
		if len(pages) == 0 {
			pages = []int{0, 16 << 10}
		}
		for _, page := range pages {
			r, err := storage(ctx, &o, page, 16, o.storageEvents())
			if err != nil {
				return rep, fmt.Errorf("storage, page size %d: %w", page, err)
			}
			rep.Storage = append(rep.Storage, r)
		}
	}
	if o.runs(ScenarioRemote) {
		round := time.Duration(float64(2500*time.Millisecond) * scale)
		r, err := remote(ctx, &o, max(round, 100*time.Millisecond))
		if err != nil {
			return rep, fmt.Errorf("remote: %w", err)
		}
		rep.Remote = append(rep.Remote, r)
	}
	if o.runs(ScenarioLongLived) {
		r, err := longLived(ctx, &o, 16, o.scale(210000, 4*16*longLivedEventsPerRun), 3)
		if err != nil {
			return rep, fmt.Errorf("long-lived: %w", err)
		}
		rep.LongLived = &r
	}
	if o.runs(ScenarioLedger) {
		for _, c := range []struct{ spawners, cycles int }{{1, 400}, {64, 3200}} {
			r, err := ledger(ctx, &o, c.spawners, o.scale(c.cycles, c.spawners*2))
			if err != nil {
				return rep, fmt.Errorf("ledger, %d spawners: %w", c.spawners, err)
			}
			rep.Ledger = append(rep.Ledger, r)
		}
	}
	if o.runs(ScenarioState) {
		for _, c := range []struct{ scopes, ops, reads int }{{1, 2000, 400}, {64, 16000, 640}} {
			r, err := state(ctx, &o, c.scopes, o.scale(c.ops, c.scopes*2), o.scale(c.reads, c.scopes*2))
			if err != nil {
				return rep, fmt.Errorf("state, %d scopes: %w", c.scopes, err)
			}
			rep.State = append(rep.State, r)
		}
	}
	if o.runs(ScenarioPartial) {
		for _, scopes := range []int{partialStreams, 4} {
			r, err := partial(ctx, &o, partialStreams, scopes)
			if err != nil {
				return rep, fmt.Errorf("partial output, %d streams over %d scopes: %w", partialStreams, scopes, err)
			}
			rep.Partial = append(rep.Partial, r)
		}
	}
	rep.Seconds = time.Since(begin).Seconds()
	rep.Goals = rep.goals()
	rep.Unjudged = rep.unjudged(&o)
	return rep, nil
}
