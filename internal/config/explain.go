package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Explain writes the configuration as YAML — every key, defaults included —
// with where each value came from as a comment: "default", "file.yaml:12"
// or "flag --shards".
func (f *File) Explain(w io.Writer) error {
	type line struct{ text, origin string }
	var lines []line
	add := func(depth int, text string, o Origin) {
		lines = append(lines, line{strings.Repeat("  ", depth) + text, o.String()})
	}
	var open []string // the sections printed, outermost first
	for _, s := range settings {
		parts := strings.Split(s.key, ".")
		sections := parts[:len(parts)-1]
		n := 0
		for n < len(open) && n < len(sections) && open[n] == sections[n] {
			n++
		}
		open = open[:n]
		for ; n < len(sections); n++ {
			lines = append(lines, line{strings.Repeat("  ", n) + sections[n] + ":", ""})
			open = append(open, sections[n])
		}
		name, depth := parts[len(parts)-1], len(sections)
		if s.overrides {
			f.explainOverrides(s.key, depth, add)
			continue
		}
		if s.key == "store" {
			add(depth, name+": "+quote(RedactStore(f.Store)), f.Origin(s.key))
			continue
		}
		add(depth, name+": "+format(s.field(f)), f.Origin(s.key))
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l.text))
	}
	width = min(width, 48)
	var b strings.Builder
	b.WriteString("# stateindex configuration: every setting, with where its value came from\n")
	if len(f.Sources) > 0 {
		fmt.Fprintf(&b, "# files read: %s\n", strings.Join(f.Sources, ", "))
	}
	for _, l := range lines {
		if l.origin == "" {
			b.WriteString(l.text + "\n")
			continue
		}
		fmt.Fprintf(&b, "%-*s  # %s\n", width, l.text, l.origin)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (f *File) explainOverrides(key string, depth int, add func(int, string, Origin)) {
	type kv struct {
		k string
		v any
	}
	var items [][]kv
	switch key {
	case "tokens.scopes":
		for _, o := range f.Tokens.Scopes {
			items = append(items, []kv{{"prefix", &o.Prefix}, {"counter", &o.Counter}})
		}
	case "hooks":
		for _, h := range f.Hooks {
			it := []kv{{"name", &h.Name}, {"on", &h.On}}
			for _, hk := range []struct {
				k string
				v *string
			}{{"scope_prefix", &h.ScopePrefix}, {"goal_prefix", &h.GoalPrefix}, {"actor", &h.Actor}, {"kind", &h.Kind}, {"identity", &h.Identity}} {
				if *hk.v != "" {
					it = append(it, kv{hk.k, hk.v})
				}
			}
			items = append(items, append(it, kv{"timeout", &h.Timeout}))
		}
	case "retention.overrides":
		for _, o := range f.Retention.Overrides {
			it := []kv{{"scope_prefix", &o.ScopePrefix}}
			for _, rk := range []struct {
				k  string
				v  any
				ok bool
			}{{"keep_last_n", o.KeepLastN, o.KeepLastN != nil}, {"delete_older_than", o.DeleteOlderThan, o.DeleteOlderThan != nil},
				{"on_completion", o.OnCompletion, o.OnCompletion != nil}, {"archive_dir", o.ArchiveDir, o.ArchiveDir != nil}} {
				if rk.ok {
					it = append(it, kv{rk.k, rk.v})
				}
			}
			items = append(items, it)
		}
	default:
		for _, o := range f.Expiry.Overrides {
			it := []kv{{"scope_prefix", &o.ScopePrefix}}
			if o.InactiveAfter != nil {
				it = append(it, kv{"inactive_after", o.InactiveAfter})
			}
			items = append(items, it)
		}
	}
	name := key[strings.LastIndex(key, ".")+1:]
	if len(items) == 0 {
		add(depth, name+": []", f.Origin(key))
		return
	}
	add(depth, name+":", f.Origin(key))
	for i, it := range items {
		for j, e := range it {
			lead := "  "
			if j == 0 {
				lead = "- "
			}
			add(depth+1, lead+e.k+": "+format(e.v), f.Origin(fmt.Sprintf("%s[%d].%s", key, i, e.k)))
		}
	}
}

// format writes the value ptr points to as a YAML scalar or flow list.
func format(ptr any) string {
	switch p := ptr.(type) {
	case *int:
		return strconv.Itoa(*p)
	case *int64:
		return strconv.FormatInt(*p, 10)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		return formatDuration(*p)
	case *bool:
		if *p {
			return "on"
		}
		return "off"
	case *string:
		return quote(*p)
	case *[]string:
		q := make([]string, len(*p))
		for i, s := range *p {
			q[i] = quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(ptr)
}

// quote writes s plain when YAML reads it back as the same string, quoted
// otherwise.
func quote(s string) string {
	var n yaml.Node
	if s != "" && !strings.ContainsAny(s, ":#,[]{}&*!|>'\"%@`\n") && yaml.Unmarshal([]byte(s), &n) == nil &&
		len(n.Content) == 1 && n.Content[0].ShortTag() == "!!str" && n.Content[0].Value == s {
		return s
	}
	return strconv.Quote(s)
}
