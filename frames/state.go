package frames

// DefaultRequestWindow is how many recent request ids a scope remembers.
const DefaultRequestWindow = 1024

// RequestRecord remembers a committed request: its id, the digest of what it
// asked, and the versions of the events it produced, from which the shell
// rebuilds the original reply for a repeat.
type RequestRecord struct {
	ID           string `msgpack:"id"`
	Hash         []byte `msgpack:"h"`
	FirstVersion int64  `msgpack:"f"`
	LastVersion  int64  `msgpack:"l"`
}

// TokenRecord is a suspension token the scope issued.
type TokenRecord struct {
	FrameID   string `msgpack:"f"`
	ExpiresAt int64  `msgpack:"x"`
	Used      bool   `msgpack:"u"`
}

// State is a scope's projection: the fold of its events. It is not safe for
// concurrent use; the actor that owns it is its only user.
type State struct {
	Scope   string `msgpack:"sc"`
	Version int64  `msgpack:"v"` // stream version of the last applied event
	// Frames by id, and their ids in push order.
	Frames map[string]*Frame       `msgpack:"fr"`
	Order  []string                `msgpack:"o"`
	Tokens map[string]*TokenRecord `msgpack:"tk"`
	// Requests is the window of recent requests, oldest first.
	Requests []RequestRecord `msgpack:"rq"`
	Window   int             `msgpack:"w"`
	Resumes  int64           `msgpack:"rs"`
	// LastAt is the server time of the last applied event.
	LastAt int64 `msgpack:"la"`

	requestIdx map[string]int // request id -> index in Requests
}

// NewState returns the empty projection of scope (a scope with no events).
// window <= 0 means DefaultRequestWindow.
func NewState(scope string, window int) *State {
	if window <= 0 {
		window = DefaultRequestWindow
	}
	return &State{Scope: scope, Frames: map[string]*Frame{}, Tokens: map[string]*TokenRecord{}, Window: window}
}

// Normalize restores what a decoder leaves out (nil maps, indexes); call it
// after loading a State from a snapshot.
func (s *State) Normalize() {
	if s.Frames == nil {
		s.Frames = map[string]*Frame{}
	}
	if s.Tokens == nil {
		s.Tokens = map[string]*TokenRecord{}
	}
	if s.Window <= 0 {
		s.Window = DefaultRequestWindow
	}
	s.requestIdx = nil
}

// Frame returns the frame with id, or nil.
func (s *State) Frame(id string) *Frame { return s.Frames[id] }

// Request returns the remembered request with id, if it is in the window.
func (s *State) Request(id string) (RequestRecord, bool) {
	if len(s.requestIdx) != len(s.Requests) {
		s.requestIdx = make(map[string]int, len(s.Requests))
		for i, r := range s.Requests {
			s.requestIdx[r.ID] = i
		}
	}
	i, ok := s.requestIdx[id]
	if !ok {
		return RequestRecord{}, false
	}
	return s.Requests[i], true
}

// TopOfStack is the most recently pushed frame that is still active, or nil.
func (s *State) TopOfStack() *Frame {
	for i := len(s.Order) - 1; i >= 0; i-- {
		if f := s.Frames[s.Order[i]]; f != nil && f.Status == StatusActive {
			return f
		}
	}
	return nil
}

// Ancestry returns the path root → id, or nil if id is unknown.
func (s *State) Ancestry(id string) []*Frame {
	var path []*Frame
	for f := s.Frames[id]; f != nil; f = s.Frames[f.ParentID] {
		path = append(path, f)
		if f.ParentID == "" {
			break
		}
	}
	for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return path
}

// LiveChildren returns f's children that are still live. It scans every
// child f ever had: use f.LiveKids when only the count matters.
func (s *State) LiveChildren(f *Frame) []*Frame {
	if f.LiveKids == 0 {
		return nil
	}
	var out []*Frame
	for _, id := range f.Children {
		if c := s.Frames[id]; c != nil && c.Status.Live() {
			out = append(out, c)
		}
	}
	return out
}

// LiveFrames returns every live frame in push order.
func (s *State) LiveFrames() []*Frame {
	var out []*Frame
	for _, id := range s.Order {
		if f := s.Frames[id]; f != nil && f.Status.Live() {
			out = append(out, f)
		}
	}
	return out
}

// PendingKind classifies pending work found on recovery.
type PendingKind string

// Pending work kinds.
const (
	PendingWaitingForSubcall PendingKind = "waiting_for_subcall"
	PendingToolInDoubt       PendingKind = "tool_in_doubt"
	PendingSuspended         PendingKind = "suspended"
	PendingToolAbandoned     PendingKind = "tool_abandoned"
)

// PendingWork names one piece of unfinished work in a scope.
type PendingWork struct {
	FrameID     string      `msgpack:"f"`
	Kind        PendingKind `msgpack:"k"`
	ToolCallID  string      `msgpack:"t,omitempty"`
	Description string      `msgpack:"d"`
}

// Pending lists the scope's unfinished work in push order: frames waiting on
// subcalls, tool calls started and never finished (in doubt: never re-run
// them blindly), suspended frames, and tool calls abandoned when their frame
// was popped (they may have run; they are listed for good, never forgotten).
func (s *State) Pending() []PendingWork {
	var out []PendingWork
	for _, id := range s.Order {
		f := s.Frames[id]
		if f == nil {
			continue
		}
		for _, c := range f.Abandoned() {
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingToolAbandoned, ToolCallID: c.ID,
				Description: "tool '" + c.Name + "' started and never finished: abandoned when its frame was popped (" + f.Status.String() + ")"})
		}
		if !f.Status.Live() {
			continue
		}
		switch f.Status {
		case StatusWaiting:
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingWaitingForSubcall,
				Description: "frame '" + f.Goal + "' waiting for subcalls"})
		case StatusSuspended:
			d := "frame '" + f.Goal + "' suspended"
			if f.Suspension != nil {
				d += " (" + string(f.Suspension.Reason) + ")"
			}
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingSuspended, Description: d})
		}
		for _, c := range f.InDoubt() {
			out = append(out, PendingWork{FrameID: f.ID, Kind: PendingToolInDoubt, ToolCallID: c.ID,
				Description: "tool '" + c.Name + "' started and never finished: in doubt"})
		}
	}
	return out
}

// Clone returns a deep copy of s that shares nothing with it; clones of equal
// states are reflect.DeepEqual.
func (s *State) Clone() *State {
	c := *s
	c.requestIdx = nil
	c.Frames = make(map[string]*Frame, len(s.Frames))
	for id, f := range s.Frames {
		c.Frames[id] = f.Clone()
	}
	c.Order = append([]string(nil), s.Order...)
	c.Tokens = make(map[string]*TokenRecord, len(s.Tokens))
	for id, t := range s.Tokens {
		tc := *t
		c.Tokens[id] = &tc
	}
	c.Requests = nil
	for _, r := range s.Requests {
		r.Hash = cloneBytes(r.Hash)
		c.Requests = append(c.Requests, r)
	}
	return &c
}

// StateFormat is the layout version of an encoded State (a snapshot). A
// snapshot of another format is ignored and the scope replayed instead.
// Format 2: Cost.Spawns counts every descendant, not only children, and tool
// calls open when their frame was popped are marked abandoned.
const StateFormat uint32 = 2
