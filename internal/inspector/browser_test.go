package inspector

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stateindex/stateindex/messages"
)

// The browser test loads the inspector's pages in a real headless Chromium
// (Debian's chromium package) and reads the DOM it built. Without chromium
// it is skipped, unless STATEINDEX_BROWSER_TEST=1 (CI sets it), which makes
// a missing browser a failure. STATEINDEX_SCREENSHOT=FILE also writes a
// screenshot of the scope page there (docs/inspector.png is made so).

func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("STATEINDEX_BROWSER_TEST") == "1" {
		t.Fatal("STATEINDEX_BROWSER_TEST=1 but no chromium found: apt-get install -y chromium")
	}
	t.Skip("no chromium found (apt-get install -y chromium); set STATEINDEX_BROWSER_TEST=1 to require it")
	return ""
}

// chromium runs the browser headless on url with args (--dump-dom, or a
// screenshot) and returns what it printed.
func chromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, err, "chromium %v: %s", args, errb.String())
	return out.String()
}

// element is one element of a parsed DOM, with its attributes and the
// text inside it.
type element struct {
	name   string
	attrs  map[string]string
	parent *element
	text   strings.Builder
}

// parseDOM reads the DOM Chromium serialized: every element, in document
// order, each knowing its parent.
func parseDOM(t *testing.T, dom string) []*element {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(dom))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	var all []*element
	var stack []*element
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the DOM parses")
		switch tk := tok.(type) {
		case xml.StartElement:
			e := &element{name: strings.ToLower(tk.Name.Local), attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(stack) > 0 {
				e.parent = stack[len(stack)-1]
			}
			all = append(all, e)
			stack = append(stack, e)
		case xml.EndElement:
			for i := len(stack) - 1; i >= 0; i-- {
				if stack[i].name == strings.ToLower(tk.Name.Local) {
					stack = stack[:i]
					break
				}
			}
		case xml.CharData:
			for _, e := range stack {
				e.text.Write(tk)
			}
		}
	}
	return all
}

// with returns the elements that have attribute name, in document order.
func with(els []*element, name string) []*element {
	var out []*element
	for _, e := range els {
		if _, ok := e.attrs[name]; ok {
			out = append(out, e)
		}
	}
	return out
}

func values(els []*element, name string) []string {
	var out []string
	for _, e := range with(els, name) {
		out = append(out, e.attrs[name])
	}
	return out
}

// frameParent is the data-frame of the nearest frame element around e.
func frameParent(e *element) string {
	for p := e.parent; p != nil; p = p.parent {
		if id, ok := p.attrs["data-frame"]; ok && p.name == "li" {
			return id
		}
	}
	return ""
}

func TestBrowserShowsTheScope(t *testing.T) {
	bin := findChromium(t)
	start := time.Now()
	fx := newFixture(t)
	in, err := New(fx.c, Options{})
	require.NoError(t, err)
	srv, err := Listen("127.0.0.1:0", in, false)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	base := srv.URL()
	s := url.QueryEscape(fx.scope)
	before := fx.version(t)

	// The scope page: the tree nests the known frames as pushed.
	dom := parseDOM(t, chromium(t, bin, "--dump-dom", base+"scope?s="+s))
	parents := map[string]string{}
	goals := map[string]string{}
	for _, e := range with(dom, "data-frame") {
		if e.name == "li" {
			parents[e.attrs["data-frame"]] = frameParent(e)
			goals[e.attrs["data-frame"]] = e.text.String()
		}
	}
	assert.Equal(t, map[string]string{fx.root: "", fx.research: fx.root, fx.book: fx.root, fx.compare: fx.book, fx.pay: fx.root}, parents,
		"the tree's nesting is the frames' (root → research, book → compare, pay)")
	assert.Contains(t, goals[fx.compare], hostileGoal, "the goal is shown as text, escaped")
	assert.Contains(t, goals[fx.root], "plan the trip to Lisbon")
	assert.Equal(t, []string{"call-search-1"}, values(dom, "data-in-doubt"))
	assert.Contains(t, values(dom, "data-abandoned"), "call-charge-1")
	for _, e := range with(dom, "data-frame") {
		if e.attrs["data-frame"] == fx.research {
			assert.Equal(t, "suspended", e.attrs["data-status"])
		}
	}
	for _, e := range dom {
		assert.False(t, e.name == "b" && e.text.String() == "per night", "no b element: the goal's markup stayed text")
	}

	// The pack preview lists what AssembleContextPack returns for the
	// same frame and budget.
	for _, budget := range []string{"600", "3000"} {
		dom = parseDOM(t, chromium(t, bin, "--dump-dom", base+"pack?s="+s+"&f="+fx.research+"&budget="+budget))
		n, _ := parseInt(budget)
		pack, err := fx.c.AssembleContextPack(context.Background(), &messages.AssembleContextPack{Header: messages.Header{Scope: fx.scope},
			FrameID: fx.research, BudgetTokens: n})
		require.NoError(t, err)
		var segs []string
		for _, sg := range pack.Segments {
			segs = append(segs, sg.HandleID)
		}
		assert.Equal(t, segs, values(dom, "data-included"), "budget %s: included, in order", budget)
		assert.Equal(t, pack.Dropped, values(dom, "data-dropped"), "budget %s: dropped", budget)
		assert.Equal(t, pack.Summarized, values(dom, "data-summarized"), "budget %s: summarized", budget)
		if budget == "600" {
			assert.NotEmpty(t, pack.Dropped, "a small budget drops something: the comparison is not vacuous")
		}
	}

	// The other pages load.
	for path, marker := range map[string]string{
		"":                              "data-scope",
		"scope/timeline?s=" + s:         "data-reason",
		"scope/state?s=" + s:            "data-key",
		"scope/ledger?s=" + s:           "data-reservation",
		"frame?s=" + s + "&f=" + fx.pay: "data-call",
	} {
		dom = parseDOM(t, chromium(t, bin, "--dump-dom", base+path))
		assert.NotEmpty(t, with(dom, marker), "%s shows %s", path, marker)
	}
	dom = parseDOM(t, chromium(t, bin, "--dump-dom", base+"scope?s=no-such-scope"))
	assert.Equal(t, []string{"404"}, values(dom, "data-status"), "an unknown scope is a 404 page")

	if shot := os.Getenv("STATEINDEX_SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		require.NoError(t, err)
		chromium(t, bin, "--screenshot="+abs, "--window-size=1280,900", "--hide-scrollbars", base+"scope?s="+s)
		st, err := os.Stat(abs)
		require.NoError(t, err)
		assert.Positive(t, st.Size())
	}
	assert.Equal(t, before, fx.version(t), "the browser's reads appended nothing")
	t.Logf("browser test took %s", time.Since(start).Round(time.Millisecond))
}

func parseInt(s string) (int64, error) {
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a number")
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}
