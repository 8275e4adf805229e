package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/stateindex/stateindex/eventstore"
	"github.com/stateindex/stateindex/frames"
)

// formatStateJSON is export's --format for one run in the seed's state
// schema (frames.StateJSON has the mapping).
const formatStateJSON = "state.json"

// exportStateJSON writes frame id of scope (default: the current root) as
// a state.json document.
func exportStateJSON(ctx context.Context, store *eventstore.BoltStore, dataDir, scope, id string, w, stderr io.Writer) error {
	info, err := store.Stream(ctx, scope)
	if err != nil {
		return err
	}
	if info.Version == 0 {
		return fmt.Errorf("no scope %q in %s", scope, dataDir)
	}
	st, _, err := eventstore.LoadState(ctx, store, scope, 0, 0, nil)
	if err != nil {
		return err
	}
	var f *frames.Frame
	var savedAt int64
	switch {
	case id == "":
		if f = currentRoot(st); f == nil {
			return fmt.Errorf("scope %q has no live frame to take the current root of: name a frame with --frame", scope)
		}
		savedAt = st.LastAt
	default:
		if err := frames.ValidateID("frame id", id, frames.DefaultConfig().MaxIDBytes); err != nil {
			return err
		}
		if f = st.Frame(id); f != nil {
			savedAt = st.LastAt
			break
		}
		// A finished frame: from its records in the log.
		if f, err = eventstore.LoadFinishedFrame(ctx, store, scope, id); err != nil {
			if errors.Is(err, frames.ErrFrameNotFound) {
				return fmt.Errorf("no frame %q in scope %q", id, scope)
			}
			return err
		}
		st.LinkPointers(f) // a finished head resumed since: where its chain went
		savedAt = f.CompletedAt
	}
	doc := frames.StateJSON(f, savedAt, stateInputs(f.Inputs))
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported frame %s of scope %q (%s: %s) as state.json: %d message(s), partial output %v\n",
		f.ID, scope, f.Status, doc.Status, len(doc.Messages), doc.PartialCognition != nil)
	return nil
}

// currentRoot is the root of st's top of stack, else of its most recently
// pushed live frame (a suspended one, say), or nil.
func currentRoot(st *frames.State) *frames.Frame {
	f := st.TopOfStack()
	if f == nil {
		live := st.LiveFrames()
		if len(live) == 0 {
			return nil
		}
		f = live[len(live)-1]
	}
	return st.Ancestry(f.ID)[0]
}

// stateInputs turns a frame's inputs — opaque bytes, as the caller encoded
// them — into the object the schema's inputs is: a JSON object as it is;
// msgpack (what the Go client's callers mostly send) decoded, a map as the
// object and any other value as {"value": ...}; anything else as
// {"base64": ...}. No inputs are {}.
func stateInputs(raw []byte) any {
	if len(raw) == 0 {
		return map[string]any{}
	}
	var obj map[string]json.RawMessage
	if json.Valid(raw) && json.Unmarshal(raw, &obj) == nil && obj != nil {
		return json.RawMessage(raw)
	}
	var v any
	if err := eventstore.Unmarshal(raw, &v); err == nil {
		v = jsonable(v)
		if m, ok := v.(map[string]any); ok {
			return m
		}
		return map[string]any{"value": v}
	}
	return map[string]any{"base64": base64.StdEncoding.EncodeToString(raw)}
}

// jsonable makes a decoded msgpack value encodable as JSON: map keys
// become strings.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	}
	return v
}
