package bench

import (
	"context"
	"testing"
)

func TestZZProfLedger(t *testing.T) {
	o := Options{Dir: t.TempDir(), Scale: 1}
	r, err := ledger(context.Background(), &o, 64, 3200)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r.Reserve)
	t.Logf("%+v", r.Spawn)
	t.Logf("%+v", r.Settle)
}
