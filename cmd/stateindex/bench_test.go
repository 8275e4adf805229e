package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/bench"
)

func TestBenchJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--json", "--quiet", "--scale", "0.002", "--only", "durable,assemble", "--dir", t.TempDir()}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Len(t, rep.Durable, 3)
	for _, d := range rep.Durable {
		assert.Equal(t, bench.DefaultRounds, d.Rounds, "scopes=%d", d.Scopes)
	}
	assert.Len(t, rep.Assemble, 3)
	assert.Empty(t, rep.Resume)
	assert.Empty(t, errb.String(), "--quiet prints no progress")
}

func TestBenchRounds(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--json", "--quiet", "--scale", "0.002", "--rounds", "2", "--only", "durable", "--dir", t.TempDir()}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Len(t, rep.Durable, 3)
	for _, d := range rep.Durable {
		assert.Equal(t, 2, d.Rounds)
		assert.Len(t, d.RoundFigures, 2)
		assert.Positive(t, d.ActorOff.Ops, "journal=off measured in the same run")
	}
}

func TestBenchTable(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--scale", "0.002", "--only", "storage", "--dir", t.TempDir()}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	assert.Contains(t, out.String(), "Bytes on disk per event byte")
	assert.Contains(t, errb.String(), "bench: storage:")
}

func TestBenchStorageFlags(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--json", "--quiet", "--only", "storage", "--storage-events", "32", "--storage-pages", "0,8192", "--dir", t.TempDir()}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var rep bench.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	require.Len(t, rep.Storage, 2)
	for i, page := range []int{0, 8192} {
		assert.Equal(t, page, rep.Storage[i].PageSize)
		assert.Equal(t, 32+rep.Storage[i].Scopes, rep.Storage[i].Events)
	}
}

func TestBenchBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run([]string{"bench", "--storage-events", "-1"}, &out, &errb))
	assert.Equal(t, 2, run([]string{"bench", "--storage-pages", "4k"}, &out, &errb))
	assert.Contains(t, errb.String(), `"4k" is not a page size`)
	assert.Equal(t, 2, run([]string{"bench", "--scale", "0"}, &out, &errb))
	assert.Equal(t, 2, run([]string{"bench", "--rounds", "0"}, &out, &errb))
	assert.Equal(t, 1, run([]string{"bench", "--quiet", "--only", "nope"}, &out, &errb))
	assert.Contains(t, errb.String(), "unknown scenario")
}
