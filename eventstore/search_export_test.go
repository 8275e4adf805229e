package eventstore

import (
	"encoding/base64"
	"encoding/json"
)

// CursorAt returns cursor c moved to version v (a stale cursor, for tests).
func CursorAt(c string, v int64) string {
	raw, _ := base64.RawURLEncoding.DecodeString(c)
	var at cursor
	_ = json.Unmarshal(raw, &at)
	at.V = v
	b, _ := json.Marshal(at)
	return base64.RawURLEncoding.EncodeToString(b)
}
