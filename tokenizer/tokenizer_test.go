package tokenizer

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKnownCounts(t *testing.T) {
	// Counts from the token ids OpenAI's tiktoken gives these strings.
	for _, tc := range []struct {
		name, text string
		want       int64
	}{
		{O200kBase, "hello world", 2},
		{Cl100kBase, "hello world", 2},
		{O200kBase, "", 0},
		{Cl100kBase, "supercalifragilistic", 7},
		{O200kBase, "supercalifragilistic", 6},
		{O200kBase, "We know what we are, but know not what we may be.", 14},
		{Estimate, "hello world", 3},
		{O200kBase, "<|endoftext|>", 7}, // special tokens count as plain text
	} {
		c, err := New(tc.name)
		require.NoError(t, err)
		require.Equal(t, tc.name, c.Name())
		require.Equal(t, tc.want, c.Count(tc.text), "%s %q", tc.name, tc.text)
	}
}

func TestNamesAndAliases(t *testing.T) {
	require.Equal(t, []string{Cl100kBase, Estimate, O200kBase}, Names())
	for _, alias := range []string{"", "estimate", Estimate} {
		c, err := New(alias)
		require.NoError(t, err)
		require.Equal(t, Estimate, c.Name())
	}
	_, err := New("o200k")
	require.ErrorContains(t, err, `unknown counter "o200k"`)
	require.ErrorContains(t, err, O200kBase)
	a, b := MustNew(O200kBase), MustNew(O200kBase)
	require.Same(t, a, b, "a BPE counter is built once per process")
}

func TestInvalidUTF8NeverFails(t *testing.T) {
	c := MustNew(O200kBase)
	s := "ok \xff\xfe bytes"
	n := c.Count(s)
	require.Positive(t, n)
	require.LessOrEqual(t, n, int64(len(s)))
}

func TestConcurrentCounts(t *testing.T) {
	c := MustNew(O200kBase)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 50)
	want := c.Count(text)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if got := c.Count(text); got != want {
					t.Errorf("count %d, want %d", got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
