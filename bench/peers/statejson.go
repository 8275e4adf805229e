package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stateindex/stateindex/bench"
)

// threadState is a thread's state.json as in state-persistence-checkpoints.md:
// identity, inputs, turn number, cost, limits, and the thread's history,
// which grows by one entry per checkpoint. The whole of it is rewritten at
// every checkpoint.
type threadState struct {
	ThreadID       string         `json:"thread_id"`
	Directive      string         `json:"directive"`
	Version        string         `json:"version"`
	SavedAt        string         `json:"saved_at"`
	ParentThreadID *string        `json:"parent_thread_id"`
	Inputs         map[string]any `json:"inputs"`
	TurnNumber     int            `json:"turn_number"`
	Cost           stateCost      `json:"cost"`
	Limits         stateLimits    `json:"limits"`
	Messages       []stateMessage `json:"messages"`
}

type stateCost struct {
	Turns           int     `json:"turns"`
	InputTokens     int     `json:"input_tokens"`
	OutputTokens    int     `json:"output_tokens"`
	Spend           float64 `json:"spend"`
	DurationSeconds float64 `json:"duration_seconds"`
}

type stateLimits struct {
	Spend float64 `json:"spend"`
	Turns int     `json:"turns"`
}

type stateMessage struct {
	Seq     int    `json:"seq"`
	At      string `json:"at"`
	Role    string `json:"role"`
	Content string `json:"content"`
}

// stateJSON is peer (a): .ai/threads/{thread_id}/state.json rewritten whole
// and atomically at every checkpoint — write a temporary file, fsync it,
// rename it over state.json, fsync the directory.
type stateJSON struct{}

func (stateJSON) name() string { return "state.json" }

func (stateJSON) run(ctx context.Context, dir string, total, threads, size int) (bench.Figure, string, error) {
	states := make([]*threadState, threads)
	dirs := make([]string, threads)
	for i := range threads {
		id := fmt.Sprintf("thread-%03d", i)
		dirs[i] = filepath.Join(dir, ".ai", "threads", id)
		if err := os.MkdirAll(dirs[i], 0o700); err != nil {
			return bench.Figure{}, "", err
		}
		states[i] = &threadState{ThreadID: id, Directive: "bench/checkpoints", Version: "1.0.0",
			Inputs: map[string]any{"app_name": "bench", "features": []string{"crud", "auth"}},
			Limits: stateLimits{Spend: 1.0, Turns: 1 << 30}}
	}
	fig, err := spread(ctx, total, threads, func(i, k int) error {
		st := states[i]
		st.TurnNumber++
		st.Cost.Turns++
		st.Cost.InputTokens += 1200
		st.Cost.OutputTokens += 300
		st.Cost.Spend += 0.0045
		now := time.Now().UTC().Format(time.RFC3339Nano)
		st.SavedAt = now
		st.Messages = append(st.Messages, stateMessage{Seq: k + 1, At: now, Role: "assistant", Content: content(k, size)})
		return writeAtomic(filepath.Join(dirs[i], "state.json"), st)
	})
	if err != nil {
		return fig, "", err
	}
	fi, err := os.Stat(filepath.Join(dirs[0], "state.json"))
	if err != nil {
		return fig, "", err
	}
	return fig, fmt.Sprintf("state.json grew to %.1f MB per thread", float64(fi.Size())/(1<<20)), nil
}

// writeAtomic is the seeds' atomic_write: the whole state to a temporary
// file, fsync, rename over the target, fsync the directory.
func writeAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// content is about size bytes of a checkpoint's text.
func content(k, size int) string {
	const filler = "the agent read the file, compared the figures and wrote down what it found. "
	s := fmt.Sprintf("checkpoint %d: ", k) + strings.Repeat(filler, size/len(filler)+1)
	return s[:size]
}
