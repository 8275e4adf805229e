package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/frames"
	"github.com/stateindex/stateindex/messages"
)

func init() {
	register(command{name: "state", summary: "(--data DIR | --server HOST:PORT [--config FILE]) --scope S [--frame F] [--prefix P] [--json]   print a scope's (or a frame's) key-value state: keys, versions, expiry, sizes", run: stateCmd})
}

// statePreview bounds a value's preview in the table.
const statePreview = 60

// stateCmd prints one level of a scope's key-value state: its size against
// the limit, then each key with its version, expiry, size and a preview of
// its value.
func stateCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("state", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("data", "", "data directory (read the file; no server may hold it)")
	conn := addConnectFlags(fs)
	scope := fs.String("scope", "", "the scope whose state to print")
	frame := fs.String("frame", "", "a live frame's state instead of the scope's own")
	prefix := fs.String("prefix", "", "only the keys starting with this")
	asJSON := fs.Bool("json", false, "print the keys as JSON (values as text when valid UTF-8, else base64)")
	timeout := fs.Duration("timeout", 10*time.Second, "the command's deadline")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: stateindex state (--data DIR | --server HOST:PORT [--config FILE]) --scope S [--frame F] [--prefix P] [--json]\n\n"+
			"Prints a scope's key-value state (or a live frame's): the level's keys and\n"+
			"bytes, the scope's total against its limit, then per key its version (the\n"+
			"scope version that last wrote it), its expiry, its size and its value.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if (*dir == "") == (*conn.server == "") || *scope == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "stateindex state: give one of --data and --server, and --scope")
		return errUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, stop, err := readerClient(*dir, conn, *timeout, stderr)
	if err != nil {
		return err
	}
	defer stop()
	st, err := readState(ctx, c, *scope, *frame, *prefix)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printState(stdout, st)
	return nil
}

// StateListing is what `stateindex state` prints.
type StateListing struct {
	Scope   string `json:"scope"`
	Frame   string `json:"frame,omitempty"`
	Prefix  string `json:"prefix,omitempty"`
	Version int64  `json:"version"`
	// Size is the level's (its live keys and bytes) with the scope's total
	// and limit, as the server counts them.
	Size frames.StateSize `json:"size"`
	Keys []StateKey       `json:"keys"`
}

// StateKey is one key: a value (Value or ValueBase64) or a list (Items,
// oldest first).
type StateKey struct {
	Key         string     `json:"key"`
	Version     int64      `json:"version"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Sliding     bool       `json:"sliding,omitempty"`
	Bytes       int        `json:"bytes"`
	List        bool       `json:"list,omitempty"`
	Value       *string    `json:"value,omitempty"`
	ValueBase64 []byte     `json:"value_base64,omitempty"`
	Items       []any      `json:"items,omitempty"` // each a string, or its bytes (base64)
}

// readState reads the level through a StateHandle (its pages at one
// version), then its size.
func readState(ctx context.Context, c *actors.Client, scope, frame, prefix string) (*StateListing, error) {
	h := c.FrameState(scope, frame)
	entries, err := h.Entries(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := &StateListing{Scope: scope, Frame: frame, Prefix: prefix, Version: h.Version(), Keys: []StateKey{}}
	r, err := c.RangeState(ctx, &messages.RangeState{Header: messages.Header{Scope: scope}, FrameID: frame, Limit: 1})
	if err != nil {
		return nil, err
	}
	out.Size = r.Size
	for _, e := range entries {
		k := StateKey{Key: e.Key, Version: e.Version, Sliding: e.Sliding, List: e.List}
		if e.ExpiresAt != 0 {
			at := time.Unix(0, e.ExpiresAt).UTC()
			k.ExpiresAt = &at
		}
		if e.List {
			for _, it := range e.Items {
				k.Bytes += len(it)
				if utf8.Valid(it) {
					k.Items = append(k.Items, string(it))
				} else {
					k.Items = append(k.Items, it)
				}
			}
		} else {
			k.Bytes = len(e.Value)
			if utf8.Valid(e.Value) {
				v := string(e.Value)
				k.Value = &v
			} else {
				k.ValueBase64 = e.Value
			}
		}
		out.Keys = append(out.Keys, k)
	}
	return out, nil
}

func printState(w io.Writer, st *StateListing) {
	level := "the scope's own"
	if st.Frame != "" {
		level = "frame " + st.Frame
	}
	fmt.Fprintf(w, "state of scope %s (%s)  version %d\n", st.Scope, level, st.Version)
	fmt.Fprintf(w, "level: %d keys, %d bytes; scope: %d of %d bytes\n", st.Size.Keys, st.Size.Bytes, st.Size.Total, st.Size.Limit)
	if st.Prefix != "" {
		fmt.Fprintf(w, "keys starting with %q: %d\n", st.Prefix, len(st.Keys))
	}
	if len(st.Keys) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVERSION\tEXPIRES\tSIZE\tVALUE")
	for _, k := range st.Keys {
		expires := "-"
		if k.ExpiresAt != nil {
			expires = k.ExpiresAt.Format(time.RFC3339)
			if k.Sliding {
				expires += " (sliding)"
			}
		}
		size := strconv.Itoa(k.Bytes)
		var preview string
		switch {
		case k.List:
			size = fmt.Sprintf("%d items, %d", len(k.Items), k.Bytes)
			parts := make([]string, len(k.Items))
			for i, it := range k.Items {
				parts[i] = previewOf(it)
			}
			preview = "[" + strings.Join(parts, ", ") + "]"
		case k.Value != nil:
			preview = previewOf(*k.Value)
		default:
			preview = previewOf(k.ValueBase64)
		}
		if utf8.RuneCountInString(preview) > statePreview {
			preview = string([]rune(preview)[:statePreview-1]) + "…"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", previewOf(k.Key), k.Version, expires, size, preview)
	}
	tw.Flush()
}

// previewOf shows a value: text as it is (quoted when it holds control
// characters), bytes as their count.
func previewOf(v any) string {
	switch x := v.(type) {
	case string:
		if strings.IndexFunc(x, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
			return strconv.Quote(x)
		}
		return x
	case []byte:
		return fmt.Sprintf("(%d bytes, not UTF-8)", len(x))
	}
	return fmt.Sprint(v)
}
