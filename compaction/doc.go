// Package compaction decides what of a frame's context fits a token budget
// and how a frame's context is compacted. It is part of the StateIndex pure
// core: plain functions over values, used by the frames core and the actor
// shell (AssembleContextPack calls Fit; CompactContext calls Compact and
// records the Result as a frame.compacted event).
//
// It knows context as Items: id, kind, priority, content, token count,
// recency (Seq), an optional Group that makes a tool call and its result one
// Unit, an include hint (Mandatory) and, for a summary, the ids it Covers.
//
//   - Fit chooses a context pack's content: it tries the compaction levels
//     None, Light, Moderate, Aggressive, Critical in order and stops at the
//     first where everything fits. A pack never exceeds its budget under the
//     Counter it was built with, never splits a unit, and never leaves out a
//     Critical unit: if those alone do not fit, it returns a
//     *CriticalOverflowError saying how many tokens they need.
//   - Compact applies a named Strategy (PriorityBased, SummarizeOldest,
//     TruncateAt, Custom) and reports what it removed and the summary it
//     added, so the caller can record it.
//   - Counter measures tokens: EstimateCounter (bytes/4, rounded up) by
//     default, any tokenizer through CounterFunc.
//   - Summarizer writes summaries: Extractive by default, which copies the
//     sentences holding numbers, ids, paths and URLs verbatim.
//
// # What it must never do
//
// No I/O, no clock, no randomness, no goroutines, no global state, and no
// imports beyond the standard library (frames and the shell depend on it;
// it depends on nothing). Ids are never minted here: the caller passes the
// summary's id in Options.SummaryID.
//
// # Determinism
//
// The same input gives the same output, byte for byte: the summaries it
// writes end up in the event log and must replay. Ties are broken by
// position in the input; nothing iterates a map in an order that matters.
// Custom functions, Counters and Summarizers supplied by callers must be
// deterministic too.
//
// # Performance
//
// A pack is assembled on every request, so Fit is written to touch each
// content as little as possible: counts are taken once (or trusted from
// Item.Tokens and Item.LightTokens, which the shell records when a handle
// is added), Light and the Extractive summarizer scan bytes eight at a
// time and stop once the budget is decided, and work grows with what is
// emitted rather than with what is left out: past one light pass over the
// items, a pack costs what it keeps and summarizes. A Fitter keeps its
// working memory between calls, so that the garbage collector sees little
// more than the results. See the benchmarks in bench_test.go.
//
// # Caveats
//
// Token counts are per item: Tokens is the sum of Count over the items'
// contents, which is how a pack is checked. A tokenizer that merges tokens
// across the boundary of two contents may count their concatenation
// slightly differently.
//
// Item.Tokens, when set, is trusted to be Count(Content) under the counter
// in use; a wrong value makes FitResult.Tokens disagree with a recount.
// Item.LightTokens is trusted only until checked: Fit recounts what it
// emits and starts over without it on a disagreement, so a wrong value
// costs time, not the budget. A wrong LightTokens on a content long enough
// to be abbreviated may still misstate the "N tokens elided" of its marker
// (the abbreviated content is counted exactly). FitOptions.TrustIDs turns
// the duplicate id check off.
//
// When the pack is the input unchanged, FitResult.Items is the input slice
// itself, and a summary's Covers lists ids from the input: results share
// memory with the input, never with a Fitter.
//
// Light and the summarizer treat only ASCII whitespace as whitespace, and
// sentence and fact detection are ASCII heuristics: a fact written only in
// non-ASCII digits or punctuation is not recognised as one.
package compaction
