package messages

// Notification is a message the server sends on its own initiative (a
// hook's), not a reply to a request. Its wire name is its NoticeName.
type Notification interface {
	NotificationName() string
}

// HookNotification tells a hook's target what happened to a frame (or a
// scope): one notice (frames.Notices) of one event, at a position of the
// log of the member that holds the scope. A hook delivers at least once,
// in log order: the same notice may come again (after a restart, or when
// the reply was lost), with the same Hook, Member, Position and Notice,
// which identify it. The target answers each with a HookAck (any reply
// counts as one, except an error reply: a Reply whose Failure is set);
// until it does, the hook sends it again after the hook's timeout, and
// later notices wait.
type HookNotification struct {
	Hook     string `msgpack:"hk"`
	Notice   string `msgpack:"n"`
	Scope    string `msgpack:"sc"`
	FrameID  string `msgpack:"f,omitempty"`
	Goal     string `msgpack:"g,omitempty"`
	Status   string `msgpack:"st,omitempty"`
	Reason   string `msgpack:"r,omitempty"`
	Position uint64 `msgpack:"p"`
	Version  int64  `msgpack:"v"`
	At       int64  `msgpack:"at"`
	// Member is the cluster member whose log Position is in ("" for a
	// server outside a cluster).
	Member string `msgpack:"m,omitempty"`
}

// NotificationName implements Notification.
func (*HookNotification) NotificationName() string { return "HookNotification" }

// HookAck is a hook target's answer to a HookNotification. Refused, when
// set, asks the hook to send the notification again later (the target
// could not take it now); any other reply acknowledges it.
type HookAck struct {
	Refused string `msgpack:"rf,omitempty"`
}

// NotificationName implements Notification.
func (*HookAck) NotificationName() string { return "HookAck" }
