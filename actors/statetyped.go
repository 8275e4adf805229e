package actors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/stateindex/stateindex/frames"
)

// Typed values on a StateHandle: a value is stored encoded (JSON or
// msgpack), and a list's items each encoded alone, so that a Push sends one
// item. A getter decodes a list as an array of its items: after
// PushJSON(h, "msgs", m, 50), GetJSON[[]Message](ctx, h, "msgs") returns
// the last 50 — the seed's get<Message[]>('messages').

// stateCodec encodes values one way; array joins encoded items into one
// encoded array.
type stateCodec struct {
	name      string
	marshal   func(any) ([]byte, error)
	unmarshal func([]byte, any) error
	array     func(items [][]byte) []byte
}

var (
	jsonCodec = stateCodec{name: "JSON", marshal: json.Marshal, unmarshal: json.Unmarshal, array: func(items [][]byte) []byte {
		return append(append([]byte{'['}, bytes.Join(items, []byte{','})...), ']')
	}}
	msgpackCodec = stateCodec{name: "msgpack", marshal: msgpack.Marshal, unmarshal: msgpack.Unmarshal, array: msgpackArray}
)

// msgpackArray writes an array header and the items, already encoded.
func msgpackArray(items [][]byte) []byte {
	var b bytes.Buffer
	_ = msgpack.NewEncoder(&b).EncodeArrayLen(len(items)) // a bytes.Buffer does not fail
	for _, it := range items {
		b.Write(it)
	}
	return b.Bytes()
}

func setAs[T any](c stateCodec, h *StateHandle, key string, v T, opts []StateOption) error {
	data, err := c.marshal(v)
	if err != nil {
		return fmt.Errorf("state key %q: encoding %s: %w", key, c.name, err)
	}
	h.Set(key, data, opts...)
	return nil
}

func pushAs[T any](c stateCodec, h *StateHandle, key string, v T, keep int, opts []StateOption) error {
	data, err := c.marshal(v)
	if err != nil {
		return fmt.Errorf("state key %q: encoding %s: %w", key, c.name, err)
	}
	h.Push(key, data, keep, opts...)
	return nil
}

func decodeAs[T any](c stateCodec, e frames.StateEntry) (T, error) {
	var v T
	data := e.Value
	if e.List {
		data = c.array(e.Items)
	}
	if err := c.unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("state key %q: decoding %s as %T: %w", e.Key, c.name, v, err)
	}
	return v, nil
}

func getAs[T any](ctx context.Context, c stateCodec, h *StateHandle, key string) (T, bool, error) {
	var zero T
	e, ok, err := h.entry(ctx, key)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := decodeAs[T](c, e)
	return v, err == nil, err
}

func valuesAs[T any](ctx context.Context, c stateCodec, h *StateHandle, prefix string) ([]T, error) {
	keys, err := h.Keys(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(keys))
	for i, k := range keys {
		if out[i], err = decodeAs[T](c, h.view[k]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SetJSON records that key takes v encoded as JSON (an encoding error
// records nothing).
func SetJSON[T any](h *StateHandle, key string, v T, opts ...StateOption) error {
	return setAs(jsonCodec, h, key, v, opts)
}

// PushJSON records that v, encoded as JSON, is appended to the list at key,
// which keeps its last keep items (0: all).
func PushJSON[T any](h *StateHandle, key string, v T, keep int, opts ...StateOption) error {
	return pushAs(jsonCodec, h, key, v, keep, opts)
}

// GetJSON decodes key's JSON value into a T (ok false: absent); a list
// decodes as a JSON array of its items.
func GetJSON[T any](ctx context.Context, h *StateHandle, key string) (T, bool, error) {
	return getAs[T](ctx, jsonCodec, h, key)
}

// ValuesJSON decodes the values of the keys starting with prefix ("": all)
// into Ts, in key order (the seed's values<T>()).
func ValuesJSON[T any](ctx context.Context, h *StateHandle, prefix string) ([]T, error) {
	return valuesAs[T](ctx, jsonCodec, h, prefix)
}

// SetMsgpack records that key takes v encoded as msgpack.
func SetMsgpack[T any](h *StateHandle, key string, v T, opts ...StateOption) error {
	return setAs(msgpackCodec, h, key, v, opts)
}

// PushMsgpack records that v, encoded as msgpack, is appended to the list
// at key, which keeps its last keep items (0: all).
func PushMsgpack[T any](h *StateHandle, key string, v T, keep int, opts ...StateOption) error {
	return pushAs(msgpackCodec, h, key, v, keep, opts)
}

// GetMsgpack decodes key's msgpack value into a T (ok false: absent); a
// list decodes as a msgpack array of its items.
func GetMsgpack[T any](ctx context.Context, h *StateHandle, key string) (T, bool, error) {
	return getAs[T](ctx, msgpackCodec, h, key)
}

// ValuesMsgpack decodes the values of the keys starting with prefix ("":
// all) into Ts, in key order.
func ValuesMsgpack[T any](ctx context.Context, h *StateHandle, prefix string) ([]T, error) {
	return valuesAs[T](ctx, msgpackCodec, h, prefix)
}
