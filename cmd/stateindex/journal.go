package main

import (
	"fmt"
	"strings"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/internal/verify"
)

// recoveryNote is the -h text of the tools that open the store.
const recoveryNote = `Opening the store replays its write-ahead journal (DATAFILE.journal/):
records a stopped or crashed server left only in the journal are checked
and applied to bbolt first — the recovery step every open performs. A
damaged journal is refused, naming the segment and offset. The tool
creates no journal where there is none. A running server holds the file:
stop it first (or use "stateindex backup", which asks the server).
`

// journalLine describes the journal of a data file and what opening the
// store did with it.
func journalLine(j verify.Journal) string {
	if !j.Exists {
		return "journal: none at " + j.Dir
	}
	var b strings.Builder
	fmt.Fprintf(&b, "journal: %s: %d segment(s), %d bytes on disk; ", j.Dir, j.Segments, j.Bytes)
	r := j.Replay
	if r.Records > 0 {
		fmt.Fprintf(&b, "%d frame(s) checked, %d record(s) applied to bbolt at open (sequences %d..%d)", r.Frames, r.Records, r.FromSeq, r.ToSeq)
	} else {
		fmt.Fprintf(&b, "%d frame(s) checked, bbolt already held all their records", r.Frames)
	}
	fmt.Fprintf(&b, "; %d torn byte(s) cut; %d warning(s)", r.TornBytes, len(j.Warnings))
	return b.String()
}

// storeJournal is the journal of an open store: its files and what Open
// did with them.
func storeJournal(st *eventstore.BoltStore) verify.Journal {
	j := verify.JournalOnDisk(st.Path())
	j.Replay, j.Warnings = st.Replay(), st.Warnings()
	return j
}
