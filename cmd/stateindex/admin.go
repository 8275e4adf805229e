package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/stateindex/stateindex/eventstore"
)

// The admin socket: `serve` listens on DIR/stateindex.sock (mode 0600) so
// that tools needing the store while the server holds its lock (backup)
// can ask the server. One request per connection, one JSON line each way:
//
//	{"op":"backup","to":"/abs/path"}
//	→ {"ok":true,"records":N,"last_seq":N,"bytes":N,"journal_records":N}
//	→ {"error":"..."}
//	{"op":"info"}
//	→ {"ok":true,"listen":"HOST:PORT","http":"http://HOST:PORT/"}   (where it serves; "" for none)

const (
	adminSocket      = "stateindex.sock"
	adminMaxRequest  = 64 << 10
	adminReadTimeout = 10 * time.Second
)

type adminRequest struct {
	Op string `json:"op"`
	To string `json:"to,omitempty"`
}

type adminReply struct {
	OK             bool   `json:"ok,omitempty"`
	Error          string `json:"error,omitempty"`
	Records        uint64 `json:"records,omitempty"`
	LastSeq        uint64 `json:"last_seq,omitempty"`
	Bytes          int64  `json:"bytes,omitempty"`
	JournalRecords int    `json:"journal_records,omitempty"`
	Listen         string `json:"listen,omitempty"`
	HTTP           string `json:"http,omitempty"`
}

// adminServer serves the admin socket of a running server.
type adminServer struct {
	path   string
	ln     *net.UnixListener
	store  *eventstore.BoltStore
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu           sync.Mutex
	listen, http string // where the server serves (info)
}

// setInfo records where the server serves, for the info op.
func (a *adminServer) setInfo(listen, http string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listen, a.http = listen, http
}

// startAdmin listens on DIR/stateindex.sock. The caller holds the data
// file's lock, so a socket file already there is a crashed server's: it
// is replaced. The socket is bound in a private directory, made 0600 and
// then renamed into place, so it is never reachable with a wider mode.
func startAdmin(dir string, store *eventstore.BoltStore, log *slog.Logger) (*adminServer, error) {
	path := filepath.Join(dir, adminSocket)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("admin socket %s: a file that is not a socket is in the way", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("admin socket %s: removing a stale socket: %w", path, err)
		}
		log.Info("replaced a stale admin socket (a server that did not stop cleanly)", "socket", path)
	}
	priv, err := os.MkdirTemp(dir, ".admin-*")
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	defer os.RemoveAll(priv)
	tmp := filepath.Join(priv, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // it is renamed: Close would unlink the old name
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin socket %s: %w", path, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &adminServer{path: path, ln: ln, store: store, log: log, ctx: ctx, cancel: cancel}
	a.wg.Add(1)
	go a.accept()
	return a, nil
}

func (a *adminServer) accept() {
	defer a.wg.Done()
	for {
		c, err := a.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer c.Close()
			a.serveConn(c)
		}()
	}
}

func (a *adminServer) serveConn(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(adminReadTimeout))
	line, err := bufio.NewReader(io.LimitReader(c, adminMaxRequest)).ReadBytes('\n')
	if err != nil {
		return
	}
	var req adminRequest
	var rep adminReply
	if err := json.Unmarshal(line, &req); err != nil {
		rep.Error = "bad request: " + err.Error()
	} else {
		rep = a.handle(req)
	}
	b, _ := json.Marshal(rep)
	_, _ = c.Write(append(b, '\n'))
}

func (a *adminServer) handle(req adminRequest) adminReply {
	switch req.Op {
	case "backup":
		if !filepath.IsAbs(req.To) {
			return adminReply{Error: fmt.Sprintf("backup: the target must be an absolute path, got %q", req.To)}
		}
		start := time.Now()
		info, err := a.store.Backup(a.ctx, req.To)
		if err != nil {
			a.log.Warn("backup failed", "to", req.To, "err", err)
			return adminReply{Error: err.Error()}
		}
		a.log.Info("backup written", "to", req.To, "records", info.Records, "last_seq", info.LastSeq, "bytes", info.Bytes,
			"journal_records", info.JournalRecords, "took", time.Since(start).Round(time.Millisecond))
		return adminReply{OK: true, Records: info.Records, LastSeq: info.LastSeq, Bytes: info.Bytes, JournalRecords: info.JournalRecords}
	case "info":
		a.mu.Lock()
		defer a.mu.Unlock()
		return adminReply{OK: true, Listen: a.listen, HTTP: a.http}
	}
	return adminReply{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// stop closes the socket, cancels requests in flight (a backup cut short
// leaves no file) and waits for them, then removes the socket file. It is
// idempotent.
func (a *adminServer) stop() {
	a.once.Do(func() {
		_ = a.ln.Close()
		a.cancel()
		a.wg.Wait()
		_ = os.Remove(a.path)
	})
}

// errNoServer: nothing listens on the admin socket.
var errNoServer = errors.New("no server is running")

// adminCall sends one request to the server of dir and returns its reply;
// errNoServer if no server listens there.
func adminCall(ctx context.Context, dir string, req adminRequest) (adminReply, error) {
	var rep adminReply
	path := filepath.Join(dir, adminSocket)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return rep, errNoServer
		}
		return rep, fmt.Errorf("admin socket %s: %w", path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return rep, fmt.Errorf("admin socket %s: %w", path, err)
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return rep, fmt.Errorf("admin socket %s: no reply: %w", path, err)
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, fmt.Errorf("admin socket %s: bad reply: %w", path, err)
	}
	return rep, nil
}
