package compaction

// Counter measures text in tokens. A context pack is checked under the
// counter it was built with: Fit guarantees FitResult.Tokens <= budget where
// Tokens is the sum of Count over the emitted contents, one item at a time.
// EstimateCounter is the default; a real tokenizer (for example a BPE
// counter wrapped with CounterFunc) is one option away, in FitOptions.Counter
// and Options.Counter.
//
// Count must be deterministic and never negative; Fit and Compact report
// ErrNegativeTokens otherwise. It should be cheap: Fit calls it once per item
// whose Tokens is not precomputed and once per transformed content.
type Counter interface {
	Count(s string) int64
}

// EstimateCounter is the seeds' chars/4 estimate, taken over bytes and
// rounded up: ceil(len(s)/4). Counting bytes rather than runes under-counts
// CJK text far less (about −24% against o200k, where runes/4 gives −74%),
// and it is O(1). It over-counts English prose by roughly a fifth and
// under-counts compact JSON by about as much: where that matters, use a real
// tokenizer.
type EstimateCounter struct{}

// Count returns ceil(len(s)/4).
func (EstimateCounter) Count(s string) int64 { return (int64(len(s)) + 3) / 4 }

// CounterFunc adapts a function to Counter, the way http.HandlerFunc does.
type CounterFunc func(s string) int64

// Count returns f(s).
func (f CounterFunc) Count(s string) int64 { return f(s) }

// Named is what a Counter may also implement to say which counter it is.
// Two counters of one name must count alike: a Fitter then remembers, from
// one Fit to the next under that name, the Light contents it has counted
// to check their LightTokens, and does not count them again (the check
// of a pack's recorded sizes stays exact; only its repetition goes). The
// tokenizer package's counters implement it.
type Named interface {
	Name() string
}

// LineAdditive is what a Counter may also implement to promise that its
// counts add up over the lines of a summary: Count(a+b) equals
// Count(a)+Count(b) whenever a ends in "\n" and b begins with "[". A
// byte-level BPE whose pre-tokenizer never joins a newline to a following
// "[" has it (OpenAI's o200k_base and cl100k_base do: no piece of theirs
// runs from a newline into a bracket). Extractive then counts its summary
// line by line and, within one Fitter, remembers the lines' counts from one
// summary to the next under the counter's name, counting only lines it has
// not seen: between two packs of a frame most lines of the summary are the
// same. A summary's count stays exact.
type LineAdditive interface {
	Named
	CountsAddOverLines()
}
