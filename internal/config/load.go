package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/internal/inspector"
	"github.com/stateindex/stateindex/tokenizer"
)

// Load reads the file at path, following its extends chain, and resolves
// it over the defaults. An empty path gives the defaults.
func Load(path string) (*File, error) { return resolve(path, nil) }

// LoadSecurity reads the file at path as Load does (every value checked
// by its own rule) but checks only what connecting needs, not the rules
// between keys that serving needs (a member's file may leave --listen and
// --peers to the command line), and returns its Security (see
// File.Security): for the commands that reach a server with the server's
// own configuration file.
func LoadSecurity(path string, log *slog.Logger) (*actors.Security, error) {
	f := Default()
	l := &loader{files: map[*yaml.Node]string{}}
	root, err := l.load(path, Origin{})
	if err != nil {
		return nil, err
	}
	f.Sources = l.sources
	if err := f.applyMap(root, "", l.files); err != nil {
		return nil, err
	}
	return f.Security(log)
}

// resolve builds a File: defaults, then the file, then the flags given
// (name, value pairs in command-line order), then the checks that span
// several keys.
func resolve(path string, flags [][2]string) (*File, error) {
	f := Default()
	if path != "" {
		l := &loader{files: map[*yaml.Node]string{}}
		root, err := l.load(path, Origin{})
		if err != nil {
			return nil, err
		}
		f.Sources = l.sources
		if err := f.applyMap(root, "", l.files); err != nil {
			return nil, err
		}
	}
	for _, fl := range flags {
		if err := f.SetFlag(fl[0], fl[1]); err != nil {
			return nil, err
		}
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return f, nil
}

// SetFlag applies a serve flag's value (name without dashes) as the
// command line does, checked by the same rules as a file's value.
func (f *File) SetFlag(name, value string) error {
	if f.origins == nil {
		f.origins = map[string]Origin{}
	}
	for _, s := range settings {
		if s.flag == name {
			o := Origin{Flag: name}
			if err := assign(s.spec, s.field(f), nil, value, o, s.key); err != nil {
				return err
			}
			f.origins[s.key] = o
			return nil
		}
	}
	return fmt.Errorf("%w: no setting has the flag --%s", ErrInvalid, name)
}

// check applies the rules that involve more than one key.
func (f *File) check() error {
	f.Tokens.Counter, _ = tokenizer.Canonical(f.Tokens.Counter) // checked by its spec: "estimate" reads as the estimate
	name, peers := f.Origin("cluster.name"), f.Origin("cluster.peers")
	switch {
	case f.Cluster.Name != "" && (f.Remoting.Listen == "" || len(f.Cluster.Peers) == 0):
		if name.Flag != "" {
			return errAt(name, "", "needs --listen and --peers")
		}
		return errAt(name, "cluster.name", "needs remoting.listen (--listen) and cluster.peers (--peers)")
	case f.Cluster.Name == "" && len(f.Cluster.Peers) > 0:
		if peers.Flag != "" {
			return errAt(peers, "", "needs --cluster")
		}
		return errAt(peers, "cluster.peers", "needs cluster.name (--cluster)")
	case f.Tokens.TTL > f.Tokens.MaxTTL:
		return errAt(f.Origin("tokens.ttl"), "tokens.ttl", "(%s) must not exceed tokens.max_ttl (%s)", formatDuration(f.Tokens.TTL), formatDuration(f.Tokens.MaxTTL))
	}
	switch lc := f.Origin("ledger.cap"); {
	case f.Ledger.Unestimated == "cap" && f.Ledger.Cap <= 0:
		return errAt(f.Origin("ledger.unestimated"), "ledger.unestimated", "is cap: it needs ledger.cap, a positive amount (got %s)", format(&f.Ledger.Cap))
	case f.Ledger.Unestimated != "cap" && f.Ledger.Cap != 0:
		return errAt(lc, "ledger.cap", "(%s) applies only with ledger.unestimated: cap, not %s", format(&f.Ledger.Cap), f.Ledger.Unestimated)
	}
	if _, err := f.LedgerKey(); err != nil {
		return err
	}
	if err := f.checkHTTP(); err != nil {
		return err
	}
	if _, err := f.Security(nil); err != nil {
		return err
	}
	if err := f.checkState(); err != nil {
		return err
	}
	for i, h := range f.Hooks {
		if h.Kind != "" && f.Cluster.Name == "" {
			key := fmt.Sprintf("hooks[%d].kind", i)
			return errAt(f.Origin(key), key, "sends to a cluster kind: it needs cluster.name (--cluster); a standalone server reaches actors by name (actor: NAME or HOST:PORT/NAME)")
		}
	}
	return nil
}

// stateFraming is what travels with a state value besides its bytes, two
// keys (a RangeState page's entry and its cursor), the scope and two ids
// (frame, request): field names, lengths and versions, with room to spare
// (measured: under 150 bytes).
const stateFraming = 1 << 10

// checkState checks the state limits against each other and against the
// message cap: a value no request can carry, or no reply return, is a
// limit that cannot be reached.
func (f *File) checkState() error {
	l := f.Limits
	switch {
	case l.MaxStateValueBytes > l.MaxStateBytes:
		o, key := f.blame("state.max_value_bytes", "state.max_bytes")
		if key == "state.max_bytes" {
			return errAt(o, key, "(%d) must be at least state.max_value_bytes (%d): a value counts against its scope's state", l.MaxStateBytes, l.MaxStateValueBytes)
		}
		return errAt(o, key, "(%d) must not exceed state.max_bytes (%d): a value counts against its scope's state", l.MaxStateValueBytes, l.MaxStateBytes)
	}
	with := 2*l.MaxStateKeyBytes + l.MaxScopeBytes + 2*l.MaxIDBytes + stateFraming
	if max := f.Remoting.MaxMessageBytes; l.MaxStateValueBytes > max-with {
		o, key := f.blame("state.max_value_bytes", "remoting.max_message_bytes", "state.max_key_bytes", "limits.max_scope_bytes", "limits.max_id_bytes")
		what := fmt.Sprintf("(%d bytes more: two keys of state.max_key_bytes, the scope, two ids and %d of framing)", with, stateFraming)
		switch key {
		case "state.max_value_bytes":
			return errAt(o, key, "(%d) must fit in one message with its key, scope and ids %s: at most %d under remoting.max_message_bytes (%d)",
				l.MaxStateValueBytes, what, max-with, max)
		case "remoting.max_message_bytes":
			return errAt(o, key, "(%d) must carry a state value of state.max_value_bytes (%d) with its key, scope and ids %s: at least %d",
				max, l.MaxStateValueBytes, what, l.MaxStateValueBytes+with)
		}
		return errAt(o, key, "leaves no room for a state value of state.max_value_bytes (%d) in one message of remoting.max_message_bytes (%d) %s",
			l.MaxStateValueBytes, max, what)
	}
	return nil
}

// blame returns the first of keys whose value was set (a file or a flag),
// else the first, and its origin: where a rule between keys is reported.
func (f *File) blame(keys ...string) (Origin, string) {
	for _, k := range keys {
		if o := f.Origin(k); o != (Origin{}) {
			return o, k
		}
	}
	return Origin{}, keys[0]
}

// loader reads a chain of files. files maps every node read to the file
// it came from, so a value keeps its file through the merge.
type loader struct {
	files   map[*yaml.Node]string
	stack   []string // absolute paths of the files being read, outermost first
	names   []string // the same as given
	sources []string
}

// load reads path and the files it extends, and returns the merged root
// mapping. from is the extends key that named path (zero for the top file).
func (l *loader) load(path string, from Origin) (*yaml.Node, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if i := slices.Index(l.stack, abs); i >= 0 {
		return nil, errAt(from, "extends", "makes a cycle: %s", strings.Join(append(slices.Clone(l.names[i:]), path), " → "))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if from.File != "" {
			return nil, errAt(from, "extends", "names a file that cannot be read: %v", err)
		}
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	l.sources = append(l.sources, path)
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		var te *yaml.TypeError
		msg := err.Error()
		if errors.As(err, &te) {
			msg = strings.Join(te.Errors, "; ")
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		line := 0
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if n, after, ok := strings.Cut(rest, ": "); ok {
				if v, err := strconv.Atoi(n); err == nil {
					line, msg = v, after
				}
			}
		}
		return nil, &Error{File: path, Line: line, Msg: "not valid YAML: " + msg}
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if isNull(root) {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: root.Line}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: path, Line: root.Line, Msg: fmt.Sprintf("must hold a mapping of settings, got %s", describe(root))}
	}
	root = l.own(root, path)
	if err := checkDuplicates(root, "", path); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "extends" || isNull(v) {
			continue
		}
		at := Origin{File: path, Line: k.Line}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
			return nil, errAt(at, "extends", "must be a file name, got %s", describe(v))
		}
		base := v.Value
		if !filepath.IsAbs(base) {
			base = filepath.Join(filepath.Dir(path), base)
		}
		l.stack, l.names = append(l.stack, abs), append(l.names, path)
		under, err := l.load(base, at)
		l.stack, l.names = l.stack[:len(l.stack)-1], l.names[:len(l.names)-1]
		if err != nil {
			return nil, err
		}
		return l.merge(under, root), nil // one extends per file (a second is refused as a duplicate key)
	}
	return root, nil
}

// own records path as the file of every node under n, replacing aliases
// by the nodes they stand for.
func (l *loader) own(n *yaml.Node, path string) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if _, done := l.files[n]; done {
		return n
	}
	l.files[n] = path
	for i, c := range n.Content {
		n.Content[i] = l.own(c, path)
	}
	return n
}

// merge lays over on base: mappings merge key by key, anything else in
// over replaces, a null in over removes the key.
func (l *loader) merge(base, over *yaml.Node) *yaml.Node {
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: over.Line}
	l.files[out] = l.files[over]
	overAt := map[string]int{}
	for i := 0; i+1 < len(over.Content); i += 2 {
		overAt[over.Content[i].Value] = i
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(base.Content); i += 2 {
		k, v := base.Content[i], base.Content[i+1]
		if k.Value == "extends" {
			continue // the base's own base is merged in already
		}
		j, ok := overAt[k.Value]
		if !ok {
			out.Content = append(out.Content, k, v)
			continue
		}
		seen[k.Value] = true
		ok2, ov := over.Content[j], over.Content[j+1]
		switch {
		case isNull(ov):
		case v.Kind == yaml.MappingNode && ov.Kind == yaml.MappingNode:
			out.Content = append(out.Content, ok2, l.merge(v, ov))
		default:
			out.Content = append(out.Content, ok2, ov)
		}
	}
	for i := 0; i+1 < len(over.Content); i += 2 {
		k, v := over.Content[i], over.Content[i+1]
		if !seen[k.Value] && !isNull(v) && k.Value != "extends" {
			out.Content = append(out.Content, k, v)
		}
	}
	return out
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// checkDuplicates refuses a key given twice in one mapping of one file.
func checkDuplicates(m *yaml.Node, prefix, path string) error {
	first := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if line, dup := first[k.Value]; dup {
			return errAt(Origin{File: path, Line: k.Line}, prefix+k.Value, "is given twice (first at line %d)", line)
		}
		first[k.Value] = k.Line
		if v.Kind == yaml.MappingNode {
			if err := checkDuplicates(v, prefix+k.Value+".", path); err != nil {
				return err
			}
		}
	}
	return nil
}

// pathKeys are the keys that name a file: a relative path in a
// configuration file is relative to that file.
var pathKeys = map[string]func(*File) *string{
	"ledger.key_file":    func(f *File) *string { return &f.Ledger.KeyFile },
	"tls.cert_file":      func(f *File) *string { return &f.TLS.CertFile },
	"tls.key_file":       func(f *File) *string { return &f.TLS.KeyFile },
	"tls.ca_file":        func(f *File) *string { return &f.TLS.CAFile },
	"tls.client_ca_file": func(f *File) *string { return &f.TLS.ClientCAFile },
	"auth.secret_file":   func(f *File) *string { return &f.Auth.SecretFile },
}

// applyMap sets the File from a merged mapping at key path prefix.
func (f *File) applyMap(m *yaml.Node, prefix string, files map[*yaml.Node]string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := prefix + k.Value
		o := Origin{File: files[k], Line: k.Line}
		if key == "extends" || isNull(v) {
			continue
		}
		s := settingFor(key)
		switch {
		case s != nil && s.overrides && key == "hooks":
			if err := f.applyHooks(key, v, o, files); err != nil {
				return err
			}
		case s != nil && s.overrides && key == "tokens.scopes":
			if err := f.applyTokenScopes(key, v, o, files); err != nil {
				return err
			}
		case s != nil && s.overrides:
			if err := f.applyOverrides(key, v, o, files); err != nil {
				return err
			}
		case s != nil:
			if err := assign(s.spec, s.field(f), v, "", o, key); err != nil {
				return err
			}
			if key == "data_dir" && !filepath.IsAbs(f.DataDir) {
				f.DataDir = filepath.Join(filepath.Dir(o.File), f.DataDir) // relative to the file that says it
			}
			if p, ok := pathKeys[key]; ok && *p(f) != "" && !filepath.IsAbs(*p(f)) {
				*p(f) = filepath.Join(filepath.Dir(o.File), *p(f)) // as data_dir
			}
			if key == "http.secret_file" && f.HTTP.SecretFile != "" && !filepath.IsAbs(f.HTTP.SecretFile) {
				f.HTTP.SecretFile = filepath.Join(filepath.Dir(o.File), f.HTTP.SecretFile) // as data_dir
			}
			for _, k := range []struct {
				key string
				p   *string
			}{{"keys.server_key_file", &f.Keys.ServerKeyFile}, {"keys.checkpoint_key_file", &f.Keys.CheckpointKeyFile}} {
				if key == k.key && *k.p != "" && !filepath.IsAbs(*k.p) {
					*k.p = filepath.Join(filepath.Dir(o.File), *k.p) // as data_dir
				}
			}
		case isSection(key):
			if v.Kind != yaml.MappingNode {
				return errAt(o, key, "must be a mapping, got %s", describe(v))
			}
			if err := f.applyMap(v, key+".", files); err != nil {
				return err
			}
			continue
		default:
			return errAt(o, key, "is not a known key (known here: %s)", strings.Join(knownUnder(prefix), ", "))
		}
		f.origins[key] = o
	}
	return nil
}

// applyTokenScopes reads tokens.scopes: a list of {prefix, counter}, the
// counter a name of tokenizer.Names, each prefix given once.
func (f *File) applyTokenScopes(key string, v *yaml.Node, o Origin, files map[*yaml.Node]string) error {
	if v.Kind != yaml.SequenceNode {
		return errAt(o, key, "must be a list of {prefix: ..., counter: ...}, got %s", describe(v))
	}
	f.Tokens.Scopes = nil
	prefixes := map[string]int{}
	for i, item := range v.Content {
		at := fmt.Sprintf("%s[%d]", key, i)
		io := Origin{File: files[item], Line: item.Line}
		if item.Kind != yaml.MappingNode {
			return errAt(io, at, "must be a mapping {prefix: ..., counter: ...}, got %s", describe(item))
		}
		var ts TokenScope
		var hasPrefix, hasCounter bool
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			sub := at + "." + k.Value
			ko := Origin{File: files[k], Line: k.Line}
			var err error
			switch k.Value {
			case "prefix":
				err, hasPrefix = assign(spec{nonEmpty: true}, &ts.Prefix, val, "", ko, sub), true
			case "counter":
				err, hasCounter = assign(counterName, &ts.Counter, val, "", ko, sub), true
				ts.Counter, _ = tokenizer.Canonical(ts.Counter)
			default:
				err = errAt(ko, sub, "is not a known key (known here: prefix, counter)")
			}
			if err != nil {
				return err
			}
			f.origins[sub] = ko
		}
		switch {
		case !hasPrefix:
			return errAt(io, at, "needs a prefix")
		case !hasCounter:
			return errAt(io, at, "needs a counter (%s)", strings.Join(tokenizer.Names(), ", "))
		}
		if line, dup := prefixes[ts.Prefix]; dup {
			return errAt(f.origins[at+".prefix"], at+".prefix", "%q is given twice (first at line %d)", ts.Prefix, line)
		}
		prefixes[ts.Prefix] = f.origins[at+".prefix"].Line
		f.origins[at] = io
		f.Tokens.Scopes = append(f.Tokens.Scopes, ts)
	}
	return nil
}

// applyOverrides reads retention.overrides or expiry.overrides: a list of
// mappings, each with a scope_prefix and the keys it changes.
func (f *File) applyOverrides(key string, v *yaml.Node, o Origin, files map[*yaml.Node]string) error {
	if v.Kind != yaml.SequenceNode {
		return errAt(o, key, "must be a list of {scope_prefix: ..., ...}, got %s", describe(v))
	}
	prefixes := map[string]int{}
	for i, item := range v.Content {
		at := fmt.Sprintf("%s[%d]", key, i)
		io := Origin{File: files[item], Line: item.Line}
		if item.Kind != yaml.MappingNode {
			return errAt(io, at, "must be a mapping {scope_prefix: ..., ...}, got %s", describe(item))
		}
		var ro RetentionOverride
		var eo ExpiryOverride
		hasPrefix := false
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			sub := at + "." + k.Value
			ko := Origin{File: files[k], Line: k.Line}
			if isNull(val) {
				continue
			}
			var ptr any
			var sp spec
			switch {
			case k.Value == "scope_prefix":
				ptr, sp, hasPrefix = &ro.ScopePrefix, spec{nonEmpty: true}, true
			case key == "expiry.overrides" && k.Value == "inactive_after":
				eo.InactiveAfter = new(time.Duration)
				ptr, sp = eo.InactiveAfter, nonNegative()
			case key == "retention.overrides":
				for _, rk := range retentionKeys {
					if rk.key == k.Value {
						ptr, sp = rk.ovr(&ro), rk.spec
					}
				}
			}
			if ptr == nil {
				known := "scope_prefix, inactive_after"
				if key == "retention.overrides" {
					known = "scope_prefix"
					for _, rk := range retentionKeys {
						known += ", " + rk.key
					}
				}
				return errAt(ko, sub, "is not a known key (known here: %s)", known)
			}
			if err := assign(sp, ptr, val, "", ko, sub); err != nil {
				return err
			}
			f.origins[sub] = ko
		}
		if !hasPrefix {
			return errAt(io, at, "needs a scope_prefix")
		}
		if line, dup := prefixes[ro.ScopePrefix]; dup {
			return errAt(f.origins[at+".scope_prefix"], at+".scope_prefix", "%q is given twice (first at line %d)", ro.ScopePrefix, line)
		}
		prefixes[ro.ScopePrefix] = f.origins[at+".scope_prefix"].Line
		f.origins[at] = io
		if key == "retention.overrides" {
			f.Retention.Overrides = append(f.Retention.Overrides, ro)
		} else {
			eo.ScopePrefix = ro.ScopePrefix
			f.Expiry.Overrides = append(f.Expiry.Overrides, eo)
		}
	}
	return nil
}

// checkHTTP applies the inspector's rule: off loopback it needs a secret
// (inspector.CheckListen), and a secret file must be readable.
func (f *File) checkHTTP() error {
	if _, err := f.HTTPSecret(); err != nil {
		return err
	}
	if f.HTTP.Listen == "" {
		if f.HTTP.SecretFile != "" {
			return errAt(f.Origin("http.secret_file"), "http.secret_file", "needs http.listen (--http)")
		}
		return nil
	}
	mutual := f.TLS.Configured() && f.TLS.ClientAuth == string(actors.ClientAuthRequire)
	if err := inspector.CheckListen(f.HTTP.Listen, f.HTTP.SecretFile != "" || f.Auth.SecretFile != "" || mutual); err != nil {
		o := f.Origin("http.listen")
		if o.Flag != "" {
			return errAt(o, "", "%v", err)
		}
		return errAt(o, "http.listen", "%v", err)
	}
	return nil
}
