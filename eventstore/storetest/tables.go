package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/eventstore"
)

// The conformance tests of eventstore.Tables; a store that does not
// implement it skips them.

func tablesOf(t *testing.T, open Opener) (eventstore.Store, eventstore.Tables) {
	t.Helper()
	s := newStore(t, open)
	tb, ok := s.(eventstore.Tables)
	if !ok {
		t.Skipf("%T does not implement eventstore.Tables", s)
	}
	return s, tb
}

func set(k, v string) eventstore.TableOp {
	return eventstore.TableOp{Key: []byte(k), Value: []byte(v)}
}

func del(k string) eventstore.TableOp { return eventstore.TableOp{Key: []byte(k), Delete: true} }

// TableContents returns every key and value of table, in key order.
func TableContents(t testing.TB, tb eventstore.Tables, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var prev []byte
	require.NoError(t, tb.TableScan(context.Background(), table, nil, nil, false, func(k, v []byte) (bool, error) {
		require.Positive(t, bytes.Compare(k, prev), "keys out of order")
		prev = bytes.Clone(k)
		out[string(k)] = string(v)
		return true, nil
	}))
	return out
}

// testTablesOps: ops apply in order; deletes of missing keys are no
// error; tables are separate from each other and from the log.
func testTablesOps(t *testing.T, open Opener) {
	s, tb := tablesOf(t, open)
	ctx := t.Context()
	mustAppend(t, s, "a", eventstore.NoStream, ev("x", "1"))
	before := snapshotState(t, s)

	v, ok, err := tb.TableGet(ctx, "subs", []byte("k"))
	require.NoError(t, err)
	assert.False(t, ok, "a table never written is empty")
	assert.Nil(t, v)
	assert.Empty(t, TableContents(t, tb, "subs"))

	require.NoError(t, tb.TableWrite(ctx, "subs", []eventstore.TableOp{
		set("k", "1"), set("k", "2"), del("gone"), set("j", "x"), del("j"), set("e", ""),
	}))
	require.NoError(t, tb.TableWrite(ctx, "other.table_2-x", []eventstore.TableOp{set("k", "other")}))
	require.NoError(t, tb.TableWrite(ctx, "subs", nil), "no ops: nothing to do")

	v, ok, err = tb.TableGet(ctx, "subs", []byte("k"))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "2", string(v), "the later op wins")
	_, ok, err = tb.TableGet(ctx, "subs", []byte("j"))
	require.NoError(t, err)
	assert.False(t, ok, "set then deleted in one write")
	v, ok, err = tb.TableGet(ctx, "subs", []byte("e"))
	require.NoError(t, err)
	assert.True(t, ok, "an empty value is a value")
	assert.Empty(t, v)
	assert.Equal(t, map[string]string{"e": "", "k": "2"}, TableContents(t, tb, "subs"))
	assert.Equal(t, map[string]string{"k": "other"}, TableContents(t, tb, "other.table_2-x"))

	// The returned value is the caller's: changing it changes nothing.
	v, _, err = tb.TableGet(ctx, "subs", []byte("k"))
	require.NoError(t, err)
	v[0] = 'Z'
	v, _, err = tb.TableGet(ctx, "subs", []byte("k"))
	require.NoError(t, err)
	assert.Equal(t, "2", string(v))
	// So is the written value: the store keeps its own copy.
	val := []byte("mine")
	require.NoError(t, tb.TableWrite(ctx, "subs", []eventstore.TableOp{{Key: []byte("m"), Value: val}}))
	val[0] = 'X'
	v, _, err = tb.TableGet(ctx, "subs", []byte("m"))
	require.NoError(t, err)
	assert.Equal(t, "mine", string(v))

	require.NoError(t, tb.TableWrite(ctx, "subs", []eventstore.TableOp{del("k"), del("m")}))
	assert.Equal(t, map[string]string{"e": ""}, TableContents(t, tb, "subs"))

	assert.Equal(t, before, snapshotState(t, s), "table writes never touch the log")
}

// testTablesBadInput: a bad table name or op fails with ErrInvalidTable and
// writes nothing, not even the good ops before it.
func testTablesBadInput(t *testing.T, open Opener) {
	_, tb := tablesOf(t, open)
	ctx := t.Context()
	require.NoError(t, tb.TableWrite(ctx, "t", []eventstore.TableOp{set("keep", "1")}))
	good := set("new", "v")
	cases := []struct {
		name  string
		table string
		ops   []eventstore.TableOp
	}{
		{"empty name", "", []eventstore.TableOp{good}},
		{"upper case", "T", []eventstore.TableOp{good}},
		{"slash", "a/b", []eventstore.TableOp{good}},
		{"long name", strings.Repeat("a", 65), []eventstore.TableOp{good}},
		{"empty key", "t", []eventstore.TableOp{good, {Key: nil, Value: []byte("v")}}},
		{"empty key delete", "t", []eventstore.TableOp{good, {Delete: true}}},
		{"long key", "t", []eventstore.TableOp{good, {Key: bytes.Repeat([]byte("k"), eventstore.MaxTableKey+1)}}},
		{"long value", "t", []eventstore.TableOp{good, del("keep"), {Key: []byte("k"), Value: make([]byte, eventstore.MaxTableValue+1)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tb.TableWrite(ctx, tc.table, tc.ops)
			require.ErrorIs(t, err, eventstore.ErrInvalidTable)
			assert.Equal(t, map[string]string{"keep": "1"}, TableContents(t, tb, "t"))
		})
	}
	// The limits themselves are fine.
	require.NoError(t, tb.TableWrite(ctx, strings.Repeat("z", 64), []eventstore.TableOp{
		{Key: bytes.Repeat([]byte{0xff}, eventstore.MaxTableKey), Value: make([]byte, eventstore.MaxTableValue)},
	}))
	v, ok, err := tb.TableGet(ctx, strings.Repeat("z", 64), bytes.Repeat([]byte{0xff}, eventstore.MaxTableKey))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Len(t, v, eventstore.MaxTableValue)
	_, _, err = tb.TableGet(ctx, "Bad", []byte("k"))
	require.ErrorIs(t, err, eventstore.ErrInvalidTable)
	err = tb.TableScan(ctx, "", nil, nil, false, func(k, v []byte) (bool, error) { return true, nil })
	require.ErrorIs(t, err, eventstore.ErrInvalidTable)
}

// ModelScan is what TableScan must return over keys (any order): the keys
// starting with prefix, sorted (descending when reverse), from from on.
func ModelScan(keys []string, prefix, from []byte, reverse bool) []string {
	var out []string
	for _, k := range keys {
		if !strings.HasPrefix(k, string(prefix)) {
			continue
		}
		if from != nil {
			c := bytes.Compare([]byte(k), from)
			if (!reverse && c < 0) || (reverse && c > 0) {
				continue
			}
		}
		out = append(out, k)
	}
	sort.Strings(out)
	if reverse {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// testTablesScan: prefix, from and reverse against the model, over keys
// equal to prefixes, keys of 0xff bytes and froms outside the prefix's
// range; an early stop and an error from fn.
func testTablesScan(t *testing.T, open Opener) {
	_, tb := tablesOf(t, open)
	ctx := t.Context()
	keys := []string{"a", "ab", "ab\x00", "abc", "abd", "ab\xff", "ab\xff\xff", "ac", "b", "ba", "\xff", "\xff\xff", "\x00"}
	var ops []eventstore.TableOp
	for _, k := range keys {
		ops = append(ops, set(k, "v-"+k))
	}
	require.NoError(t, tb.TableWrite(ctx, "scan", ops))

	scan := func(table string, prefix, from []byte, reverse bool) []string {
		var got []string
		require.NoError(t, tb.TableScan(ctx, table, prefix, from, reverse, func(k, v []byte) (bool, error) {
			require.Equal(t, "v-"+string(k), string(v))
			got = append(got, string(k))
			return true, nil
		}))
		return got
	}
	prefixes := []string{"", "a", "ab", "abc", "ab\xff", "b", "c", "z", "\xff", "\xff\xff\xff", "\x00"}
	froms := []any{nil, "", "\x00", "a", "ab", "abb", "abc", "ab\xff", "ab\xff\xff\xff", "ac", "b", "bz", "c", "zz", "\xff", "\xff\xff\xff"}
	for _, p := range prefixes {
		for _, f := range froms {
			var from []byte
			if f != nil {
				from = []byte(f.(string))
			}
			for _, reverse := range []bool{false, true} {
				t.Run(fmt.Sprintf("prefix=%q/from=%q/reverse=%v", p, from, reverse), func(t *testing.T) {
					want := ModelScan(keys, []byte(p), from, reverse)
					assert.Equal(t, want, scan("scan", []byte(p), from, reverse))
				})
			}
		}
	}

	assert.Empty(t, scan("empty", nil, nil, false), "a table never written")
	assert.Empty(t, scan("empty", []byte("a"), []byte("a"), true))

	// fn stops the scan; an error from fn is returned.
	var got []string
	require.NoError(t, tb.TableScan(ctx, "scan", []byte("ab"), nil, true, func(k, v []byte) (bool, error) {
		got = append(got, string(k))
		return len(got) < 2, nil
	}))
	assert.Equal(t, []string{"ab\xff\xff", "ab\xff"}, got)
	boom := errors.New("boom")
	n := 0
	err := tb.TableScan(ctx, "scan", nil, nil, false, func(k, v []byte) (bool, error) {
		n++
		return true, boom
	})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 1, n)
}

// testTablesClosed: after Close every table method fails with ErrClosed;
// a canceled context fails before anything is written.
func testTablesClosed(t *testing.T, open Opener) {
	s, tb := tablesOf(t, open)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, tb.TableWrite(canceled, "t", []eventstore.TableOp{set("k", "v")}), context.Canceled)
	assert.Empty(t, TableContents(t, tb, "t"))
	_, _, err := tb.TableGet(canceled, "t", []byte("k"))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, tb.TableScan(canceled, "t", nil, nil, false, func(k, v []byte) (bool, error) { return true, nil }), context.Canceled)

	require.NoError(t, s.Close())
	ctx := t.Context()
	require.ErrorIs(t, tb.TableWrite(ctx, "t", []eventstore.TableOp{set("k", "v")}), eventstore.ErrClosed)
	_, _, err = tb.TableGet(ctx, "t", []byte("k"))
	require.ErrorIs(t, err, eventstore.ErrClosed)
	require.ErrorIs(t, tb.TableScan(ctx, "t", nil, nil, false, func(k, v []byte) (bool, error) { return true, nil }), eventstore.ErrClosed)
}
