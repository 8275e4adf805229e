package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stateindex/stateindex/actors"
	"github.com/stateindex/stateindex/frames"
)

// Hook is one entry of the hooks list: on the notices On (frames.Notices:
// limit_reached, suspended, finished, failed, continued, …) of frames in
// scopes under ScopePrefix whose goal starts with GoalPrefix, send a
// messages.HookNotification to Actor (a name registered in the server's
// actor system, or HOST:PORT/NAME for an actor on another node) or to the
// cluster kind Kind (the grain Identity; "" means the frame's scope), and
// wait up to Timeout for its reply before sending again. Delivery is at
// least once, in the log's order (a durable subscription named
// "hook.NAME").
type Hook struct {
	Name        string
	On          []string
	ScopePrefix string
	GoalPrefix  string
	Actor       string
	Kind        string
	Identity    string
	Timeout     time.Duration
}

// DefaultHookTimeout is how long a hook waits for its target's reply.
const DefaultHookTimeout = 10 * time.Second

var hookName = spec{nonEmpty: true, check: func(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}, want: "1..64 characters of a-z, 0-9, '.', '_' and '-'"}

var hookKeys = "name, on, scope_prefix, goal_prefix, actor, kind, identity, timeout"

// applyHooks reads hooks: a list of mappings, each a Hook.
func (f *File) applyHooks(key string, v *yaml.Node, o Origin, files map[*yaml.Node]string) error {
	if v.Kind != yaml.SequenceNode {
		return errAt(o, key, "must be a list of {name: ..., on: [...], actor: ... or kind: ...}, got %s", describe(v))
	}
	f.Hooks = nil
	names := map[string]int{}
	for i, item := range v.Content {
		at := fmt.Sprintf("%s[%d]", key, i)
		io := Origin{File: files[item], Line: item.Line}
		if item.Kind != yaml.MappingNode {
			return errAt(io, at, "must be a mapping (keys: %s), got %s", hookKeys, describe(item))
		}
		h := Hook{Timeout: DefaultHookTimeout}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, val := item.Content[j], item.Content[j+1]
			sub := at + "." + k.Value
			ko := Origin{File: files[k], Line: k.Line}
			var err error
			switch k.Value {
			case "name":
				err = assign(hookName, &h.Name, val, "", ko, sub)
			case "on":
				if err = assign(spec{}, &h.On, val, "", ko, sub); err == nil {
					if len(h.On) == 0 {
						err = errAt(ko, sub, "names no notice (known: %s)", noticeNames())
					}
					for _, n := range h.On {
						if _, perr := frames.ParseNotice(n); perr != nil && err == nil {
							err = errAt(ko, sub, "%v", perr)
						}
					}
				}
			case "scope_prefix":
				err = assign(spec{}, &h.ScopePrefix, val, "", ko, sub)
			case "goal_prefix":
				err = assign(spec{}, &h.GoalPrefix, val, "", ko, sub)
			case "actor":
				err = assign(spec{nonEmpty: true, check: validHookActor, want: "NAME or HOST:PORT/NAME"}, &h.Actor, val, "", ko, sub)
			case "kind":
				err = assign(spec{nonEmpty: true}, &h.Kind, val, "", ko, sub)
			case "identity":
				err = assign(spec{nonEmpty: true}, &h.Identity, val, "", ko, sub)
			case "timeout":
				err = assign(positive(), &h.Timeout, val, "", ko, sub)
			default:
				err = errAt(ko, sub, "is not a known key (known here: %s)", hookKeys)
			}
			if err != nil {
				return err
			}
			f.origins[sub] = ko
		}
		switch {
		case h.Name == "":
			return errAt(io, at, "needs a name (it names the hook's durable subscription, hook.NAME)")
		case len(h.On) == 0:
			return errAt(io, at, "needs on: the notices it fires on (%s)", noticeNames())
		case (h.Actor == "") == (h.Kind == ""):
			return errAt(io, at, "needs exactly one target: actor (NAME or HOST:PORT/NAME) or kind (a cluster kind)")
		case h.Identity != "" && h.Kind == "":
			return errAt(f.origins[at+".identity"], at+".identity", "is a cluster grain's identity: it needs kind")
		}
		if line, dup := names[h.Name]; dup {
			return errAt(f.origins[at+".name"], at+".name", "%q is given twice (first at line %d)", h.Name, line)
		}
		names[h.Name] = f.origins[at+".name"].Line
		f.origins[at] = io
		f.Hooks = append(f.Hooks, h)
	}
	return nil
}

func validHookActor(s string) bool {
	addr, name, remote := strings.Cut(s, "/")
	if !remote {
		return s != "" && !strings.ContainsAny(s, " \t")
	}
	return addr != "" && name != "" && strings.Contains(addr, ":") && !strings.Contains(name, " ")
}

func noticeNames() string {
	var b []string
	for _, n := range frames.Notices() {
		b = append(b, string(n))
	}
	return strings.Join(b, ", ")
}

// ActorHooks returns the hooks as actors.StartHooks takes them.
func (f *File) ActorHooks() []actors.Hook {
	out := make([]actors.Hook, 0, len(f.Hooks))
	for _, h := range f.Hooks {
		on := make([]frames.Notice, len(h.On))
		for i, n := range h.On {
			on[i] = frames.Notice(n)
		}
		out = append(out, actors.Hook{Name: h.Name, On: on, ScopePrefix: h.ScopePrefix, GoalPrefix: h.GoalPrefix,
			Actor: h.Actor, Kind: h.Kind, Identity: h.Identity, Timeout: h.Timeout})
	}
	return out
}
