package inspector

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/messages"
)

func get(t *testing.T, h http.Handler, method, target string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, rec.Header(), string(b)
}

func q(s string) string { return url.QueryEscape(s) }

// Every page answers 200 with the fixture's data, escaped, and reading
// them all changes nothing in the scope.
func TestPagesShowTheScopeAndWriteNothing(t *testing.T) {
	fx := newFixture(t)
	in, err := New(fx.c, Options{})
	require.NoError(t, err)
	before := fx.version(t)
	s := q(fx.scope)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{fx.root, "research flights", "registry position"}},
		{"/?status=suspended", []string{fx.research}},
		{"/scope?s=" + s, []string{`data-frame="` + fx.root, `data-frame="` + fx.compare, `data-in-doubt="call-search-1"`,
			`data-abandoned="call-charge-1"`, "approval", "tool_abandoned", "$1.000000"}},
		{"/scope/timeline?s=" + s, []string{"frame.pushed", "tool.started", "spend.reserved", `data-reason="`}},
		{"/scope/timeline?s=" + s + "&reason=run_finished", []string{"no event with reason run_finished"}},
		{"/scope/state?s=" + s, []string{`data-key="plan"`, "research, then &lt;script&gt;book()&lt;/script&gt;", "not UTF-8"}},
		{"/scope/ledger?s=" + s, []string{"researcher", "$0.400000", "open"}},
		{"/frame?s=" + s + "&f=" + fx.research, []string{"call-search-1", "in doubt", "needs &lt;approval&gt;", "Pack preview"}},
		{"/frame?s=" + s + "&f=" + fx.pay, []string{"abandoned", "failed"}},
		{"/pack?s=" + s + "&f=" + fx.research + "&budget=600", []string{"data-included=", "data-dropped=", "dropped: "}},
		{"/static/style.css", []string{"svg.bar"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, _, body := get(t, in, http.MethodGet, tc.path)
			require.Equal(t, http.StatusOK, code, body)
			for _, w := range tc.want {
				assert.Contains(t, body, w)
			}
			assert.NotContains(t, body, "<script>", "user data is escaped")
			assert.NotContains(t, body, "<approval>")
			assert.NotContains(t, body, "<b>per night</b>")
		})
	}
	code, _, body := get(t, in, http.MethodHead, "/scope?s="+s)
	assert.Equal(t, http.StatusOK, code)
	assert.Empty(t, body, "HEAD has no body")
	assert.Equal(t, before, fx.version(t), "reading every page appended nothing")
}

// The pack preview lists exactly what AssembleContextPack returns.
func TestPackPreviewIsAssembleContextPack(t *testing.T) {
	fx := newFixture(t)
	in, err := New(fx.c, Options{})
	require.NoError(t, err)
	for _, budget := range []int64{500, 700, 2000, 100000} {
		pack, err := fx.c.AssembleContextPack(context.Background(), &messages.AssembleContextPack{Header: messages.Header{Scope: fx.scope},
			FrameID: fx.research, BudgetTokens: budget})
		require.NoError(t, err)
		code, _, body := get(t, in, http.MethodGet, "/pack?s="+q(fx.scope)+"&f="+fx.research+"&budget="+itoa(budget))
		require.Equal(t, http.StatusOK, code, body)
		var segs []string
		for _, sg := range pack.Segments {
			segs = append(segs, sg.HandleID)
		}
		assert.Equal(t, segs, attrs(body, "data-included"), "budget %d: the segments in order", budget)
		assert.Equal(t, pack.Dropped, attrs(body, "data-dropped"), "budget %d", budget)
		assert.Equal(t, pack.Summarized, attrs(body, "data-summarized"), "budget %d", budget)
		assert.Contains(t, body, `data-level="`+pack.TokenSummary.CompactionLevel.String()+`"`)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// attrs lists the values of an attribute in a page, in order.
func attrs(body, name string) []string {
	var out []string
	for rest := body; ; {
		i := strings.Index(rest, name+`="`)
		if i < 0 {
			return out
		}
		rest = rest[i+len(name)+2:]
		j := strings.IndexByte(rest, '"')
		out = append(out, rest[:j])
		rest = rest[j:]
	}
}

// Bad input is a clear 400 or 404 page, never a 500; other methods 405.
func TestBadInputIsAClearError(t *testing.T) {
	fx := newFixture(t)
	in, err := New(fx.c, Options{})
	require.NoError(t, err)
	s := q(fx.scope)
	for _, tc := range []struct {
		method, path string
		status       int
		says         string
	}{
		{"GET", "/scope", 400, "which scope"},
		{"GET", "/scope?s=no-such-scope", 404, "no scope named"},
		{"GET", "/scope/timeline?s=no-such-scope", 404, "no scope named"},
		{"GET", "/scope/state?s=no-such-scope", 404, "no scope named"},
		{"GET", "/scope?s=%ff%fe", 400, "UTF-8"},
		{"GET", "/scope?s=a%3Cb%3E", 400, "invalid scope"},
		{"GET", "/scope?s=" + strings.Repeat("x", 2000), 400, "at most"},
		{"GET", "/frame?s=" + s, 400, "which frame"},
		{"GET", "/frame?s=" + s + "&f=nope", 404, "not found"},
		{"GET", "/frame?s=" + s + "&f=has%20space", 400, "frame id"},
		{"GET", "/pack?s=" + s + "&f=" + fx.research + "&budget=abc", 400, "budget"},
		{"GET", "/pack?s=" + s + "&f=" + fx.research + "&budget=10", 400, "budget"},
		{"GET", "/pack?s=" + s + "&f=" + fx.research + "&min=extreme", 400, "min"},
		{"GET", "/pack?s=" + s + "&f=nope", 404, "not found"},
		{"GET", "/scope/timeline?s=" + s + "&reason=bogus", 400, "reason"},
		{"GET", "/scope/timeline?s=" + s + "&before=-1", 400, "before"},
		{"GET", "/scope/state?s=" + s + "&frame=nope", 404, ""},
		{"GET", "/?status=sleeping", 400, "status"},
		{"GET", "/?limit=0", 400, "limit"},
		{"GET", "/nowhere", 404, "no page"},
		{"POST", "/scope?s=" + s, 405, "read-only"},
		{"DELETE", "/", 405, "read-only"},
		{"PUT", "/static/style.css", 405, "read-only"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			code, hdr, body := get(t, in, tc.method, tc.path)
			assert.Equal(t, tc.status, code, body)
			assert.Contains(t, body, tc.says)
			assert.NotContains(t, body, "goroutine", "no stack trace")
			if tc.status == 405 {
				assert.Equal(t, "GET, HEAD", hdr.Get("Allow"))
			}
		})
	}
}

// With a secret every request must carry it, as a bearer token or a basic
// password; off loopback a secret is required.
func TestSecretAndLoopback(t *testing.T) {
	fx := newFixture(t)
	in, err := New(fx.c, Options{Secret: []byte("0123456789abcdef-secret")})
	require.NoError(t, err)
	code, hdr, _ := get(t, in, "GET", "/")
	assert.Equal(t, 401, code)
	assert.Contains(t, hdr.Get("WWW-Authenticate"), "Basic")
	for _, h := range [][]string{{"Authorization", "Bearer wrong"}, {"Authorization", "Basic " + basic("u", "wrong")}, {"Authorization", "Bearer "}} {
		code, _, _ := get(t, in, "GET", "/", h...)
		assert.Equal(t, 401, code, h)
	}
	code, _, _ = get(t, in, "GET", "/", "Authorization", "Bearer 0123456789abcdef-secret")
	assert.Equal(t, 200, code)
	code, _, _ = get(t, in, "GET", "/", "Authorization", "Basic "+basic("anyone", "0123456789abcdef-secret"))
	assert.Equal(t, 200, code)

	for _, tc := range []struct {
		addr   string
		secret bool
		ok     bool
	}{
		{"127.0.0.1:0", false, true}, {"localhost:7421", false, true}, {"[::1]:0", false, true}, {"127.0.0.2:0", false, true},
		{"0.0.0.0:7421", false, false}, {":7421", false, false}, {"10.0.0.5:7421", false, false}, {"example.org:80", false, false},
		{"0.0.0.0:7421", true, true}, {"nonsense", true, false},
	} {
		err := CheckListen(tc.addr, tc.secret)
		assert.Equal(t, tc.ok, err == nil, "%s secret=%v: %v", tc.addr, tc.secret, err)
	}
	_, err = Listen("0.0.0.0:0", in, false)
	assert.ErrorContains(t, err, "not a loopback address")
}

func basic(u, p string) string {
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth(u, p)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
