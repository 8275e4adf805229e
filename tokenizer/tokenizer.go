// Package tokenizer counts tokens the way OpenAI's models do: byte-pair
// encodings o200k_base (GPT-4o, GPT-4.1, o-series, GPT-5) and cl100k_base
// (GPT-4, GPT-3.5), with their ranks compiled in (github.com/tiktoken-go/
// tokenizer: no download at run time), behind compaction.Counter, beside the
// seeds' bytes/4 estimate.
//
// It lives outside the pure core (frames, budget, compaction never import
// it: the ranks add about 12 MB to a binary) and outside actors: a program
// picks counters by name (New) and hands them to actors.Config, as
// cmd/stateindex does from its configuration file.
//
// A BPE counter costs roughly half a microsecond per token (docs/
// BENCHMARKS.md, "Tokenizer cost"): a 256 KiB handle takes tens of
// milliseconds, which is why the server counts a handle once, when it is
// added, off its shard's goroutine.
package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	tk "github.com/tiktoken-go/tokenizer"

	"github.com/stateindex/stateindex/compaction"
)

// The counters' names, as configuration files, pack metadata and events
// spell them.
const (
	// Estimate is the seeds' bytes/4 estimate (compaction.EstimateCounter),
	// the default where no counter is configured. "estimate" is accepted
	// as an alias.
	Estimate = "estimate_bytes_div_4"
	// O200kBase is the encoding of GPT-4o, GPT-4.1, the o-series and GPT-5.
	O200kBase = "o200k_base"
	// Cl100kBase is the encoding of GPT-4 and GPT-3.5.
	Cl100kBase = "cl100k_base"
)

// Counter is a compaction.Counter with the name it is configured by.
type Counter interface {
	compaction.Counter
	Name() string
}

// Names lists the counters New knows, sorted.
func Names() []string {
	n := []string{Estimate, O200kBase, Cl100kBase}
	sort.Strings(n)
	return n
}

// Canonical returns name's canonical spelling ("estimate" → Estimate) and
// whether it names a known counter.
func Canonical(name string) (string, bool) {
	switch n := strings.TrimSpace(name); n {
	case Estimate, "estimate", "":
		return Estimate, true
	case O200kBase, Cl100kBase:
		return n, true
	}
	return name, false
}

var (
	mu       sync.Mutex
	counters = map[string]Counter{}
)

// New returns the counter called name (see Names; "" is the estimate). BPE
// counters are built once per process and shared: they are safe for
// concurrent use. An unknown name is an error listing the known ones.
func New(name string) (Counter, error) {
	n, ok := Canonical(name)
	if !ok {
		return nil, fmt.Errorf("tokenizer: unknown counter %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	mu.Lock()
	defer mu.Unlock()
	if c, ok := counters[n]; ok {
		return c, nil
	}
	var c Counter
	switch n {
	case Estimate:
		c = estimate{}
	default:
		codec, err := tk.Get(tk.Encoding(n))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", n, err)
		}
		c = &bpe{name: n, codec: codec}
	}
	counters[n] = c
	return c, nil
}

// MustNew is New for names known to be valid (the constants above); it
// panics on an unknown name.
func MustNew(name string) Counter {
	c, err := New(name)
	if err != nil {
		panic(err)
	}
	return c
}

type estimate struct{ compaction.EstimateCounter }

func (estimate) Name() string { return Estimate }

// bpe counts with a byte-pair encoding. Invalid UTF-8 is tokenized as is
// (the codec's default mode), so Count never fails on any string.
type bpe struct {
	name  string
	codec tk.Codec
}

func (b *bpe) Name() string { return b.name }

// CountsAddOverLines implements compaction.LineAdditive: no piece of the
// o200k_base or cl100k_base pre-tokenizer runs from a newline into a "["
// (a piece holding a newline is whitespace, or punctuation followed by
// newlines and, in o200k_base, slashes), so a text split after a newline
// that a "[" follows counts as its parts do (TestCountsAddOverLines).
func (b *bpe) CountsAddOverLines() {}

// Count returns the number of tokens of s under the encoding, special
// tokens such as <|endoftext|> counted as the plain text they are.
func (b *bpe) Count(s string) int64 {
	if s == "" {
		return 0
	}
	n, err := b.codec.Count(s)
	if err != nil {
		// Not reachable in the default error mode; should the splitter
		// ever fail, a byte-level BPE never has more tokens than bytes,
		// so the byte count is a bound a pack can trust.
		return int64(len(s))
	}
	return int64(n)
}
