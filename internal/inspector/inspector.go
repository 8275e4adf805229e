// Package inspector is the read-only web inspector of a running StateIndex
// (`stateindex serve --http HOST:PORT`): server-rendered pages of its
// scopes — frames across scopes from the registry, a scope's frame tree
// with budget bars, pending work, in-doubt and abandoned tool calls and
// continuation chains, its event timeline by checkpoint reason, its
// key-value state and spend ledger, a frame's context and a pack preview.
//
// Every page is read through the StateIndex actor (an actors.Client), never
// from the data file, with requests that record nothing (GetScope,
// ReadScope, ListFrames, GetFrame, GetStack, GetChain, RangeState,
// GetLedger, AssembleContextPack). It answers GET and HEAD only; other
// methods are 405. Bound to a loopback address it needs nothing; on any
// other it requires a secret (CheckListen), carried as a bearer token or
// an HTTP basic password.
//
// Caveats: the pages carry no JavaScript and need none; every value shown
// is escaped by html/template (scope names, goals and content are user
// data). A page reads at one moment: a scope that moves between two of a
// page's requests shows both versions.
package inspector

import (
	"bytes"
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/messages"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Options configure an Inspector.
type Options struct {
	// Secret, when set, is what every request must carry (a bearer token
	// or a basic password). CheckListen says when it is required.
	Secret []byte
	// Logger gets a line per failed page (nil: discarded).
	Logger *slog.Logger
	// Timeout bounds the StateIndex requests of one page (0: 10 s).
	Timeout time.Duration
	// Listen is the server's remoting address, shown in the page footer
	// ("" none).
	Listen string
}

// Inspector serves the pages: an http.Handler.
type Inspector struct {
	c     *actors.Client
	o     Options
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New returns an Inspector reading through c.
func New(c *actors.Client, o Options) (*Inspector, error) {
	if c == nil {
		return nil, errors.New("inspector: nil client")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	in := &Inspector{c: c, o: o, pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("inspector: %s: %w", n, err)
		}
		in.pages[n[len("templates/"):len(n)-len(".html")]] = t
	}
	static, _ := fs.Sub(assets, "static")
	in.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	in.mux.HandleFunc("GET /{$}", in.page(in.frames))
	in.mux.HandleFunc("GET /scope", in.page(in.scope))
	in.mux.HandleFunc("GET /scope/timeline", in.page(in.timeline))
	in.mux.HandleFunc("GET /scope/state", in.page(in.state))
	in.mux.HandleFunc("GET /scope/ledger", in.page(in.ledger))
	in.mux.HandleFunc("GET /frame", in.page(in.frame))
	in.mux.HandleFunc("GET /pack", in.page(in.pack))
	in.mux.HandleFunc("/", in.page(func(r *http.Request) (string, any, error) {
		return "", nil, notFound("no page at %s", r.URL.Path)
	}))
	return in, nil
}

// ServeHTTP answers GET and HEAD (others: 405), asks for the secret when
// one is set, and never lets a panic through (500, logged).
func (in *Inspector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	defer func() {
		if v := recover(); v != nil {
			in.o.Logger.Error("inspector: a page panicked", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			in.render(w, r, http.StatusInternalServerError, "error", errorPage{Status: http.StatusInternalServerError,
				Message: "the page failed: an internal error (logged by the server)"})
		}
	}()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		in.render(w, r, http.StatusMethodNotAllowed, "error", errorPage{Status: http.StatusMethodNotAllowed,
			Message: "the inspector is read-only: GET and HEAD only, not " + r.Method})
		return
	}
	if len(in.o.Secret) > 0 && !authorized(r, in.o.Secret) {
		h.Set("WWW-Authenticate", `Basic realm="StateIndex inspector", charset="UTF-8"`)
		in.render(w, r, http.StatusUnauthorized, "error", errorPage{Status: http.StatusUnauthorized,
			Message: "this inspector needs its secret: Authorization: Bearer SECRET, or SECRET as the basic password"})
		return
	}
	in.mux.ServeHTTP(w, r)
}

// httpError is a page's failure with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

func notFound(format string, a ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, a...)}
}

// statusOf maps a failure to its status: the StateIndex's errors by code
// (not found → 404, bad input → 400, unavailable → 503), anything else 500.
func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.status
	}
	var me *messages.Error
	if errors.As(err, &me) {
		switch me.Code {
		case messages.CodeFrameNotFound, messages.CodeHandleNotFound, messages.CodeStateKeyNotFound, messages.CodeReservationNotFound:
			return http.StatusNotFound
		case messages.CodeInvalidArgument, messages.CodeInvalidScope, messages.CodeBudgetTooSmall, messages.CodeCriticalExceedsBudget,
			messages.CodeFrameNotLive, messages.CodeTooLarge:
			return http.StatusBadRequest
		case messages.CodeUnavailable, messages.CodeOverloaded:
			return http.StatusServiceUnavailable
		}
	}
	if errors.Is(err, actors.ErrTimeout) || errors.Is(err, actors.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

type errorPage struct {
	Status  int
	Message string
}

// page wraps a page's reader: it renders the named template with its data,
// or the error page with the failure's status.
func (in *Inspector) page(read func(r *http.Request) (string, any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), in.o.Timeout)
		defer cancel()
		name, data, err := read(r.WithContext(ctx))
		if err != nil {
			st := statusOf(err)
			if st >= 500 {
				in.o.Logger.Warn("inspector: page failed", "path", r.URL.Path, "status", st, "error", err)
			}
			in.render(w, r, st, "error", errorPage{Status: st, Message: err.Error()})
			return
		}
		in.render(w, r, http.StatusOK, name, data)
	}
}

// view is what the layout needs besides a page's own data.
type view struct {
	Title  string
	Scope  string // the scope the page is about ("" none): the scope tabs
	Tab    string
	Listen string
	Now    time.Time
	Data   any
}

// titled is a page's data that names its title, scope and tab.
type titled interface {
	head() (title, scope, tab string)
}

func (in *Inspector) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	t := in.pages[name]
	v := view{Title: "StateIndex inspector", Listen: in.o.Listen, Now: time.Now().UTC(), Data: data}
	switch d := data.(type) {
	case titled:
		v.Title, v.Scope, v.Tab = d.head()
	case errorPage:
		v.Title = fmt.Sprintf("%d %s", d.Status, http.StatusText(d.Status))
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		in.o.Logger.Error("inspector: template failed", "page", name, "error", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, "500: the page could not be rendered (logged by the server)")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}

// Server is an Inspector listening on an address.
type Server struct {
	srv    *http.Server
	ln     net.Listener
	scheme string
	done   chan struct{}
}

// Listen starts serving h on addr after CheckListen (a secret is required
// off loopback: hasSecret says h asks for one).
func Listen(addr string, h http.Handler, hasSecret bool) (*Server, error) {
	return ListenTLS(addr, h, hasSecret, nil)
}

// ListenTLS is Listen over TLS when tlsCfg is not nil (the node's remoting
// certificate and client-certificate rule: Security.HTTPServerTLS).
func ListenTLS(addr string, h http.Handler, hasSecret bool, tlsCfg *tls.Config) (*Server, error) {
	if err := CheckListen(addr, hasSecret); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https"
	}
	s := &Server{ln: ln, scheme: scheme, done: make(chan struct{}), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is the inspector's address for a browser.
func (s *Server) URL() string { return s.scheme + "://" + s.ln.Addr().String() + "/" }

// Close stops it: pages in progress get until ctx ends to finish.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	return err
}
