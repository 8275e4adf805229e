package messages

// SearchChain searches every link of the continuation chain FrameID is a
// link of (any link: the root, the head or one between) for Query: a
// substring, or an RE2 expression when Regex is set. It reads the scope's
// log: every handle each link ever had (compacted ones included, and
// content stored by reference), tool calls and their results, results,
// goals; history retention removed is read from its archive while the
// file is still in the archive directory, and named in Unsearched when
// it is not. Hits come in log order, Limit a page (0: 50; at most 500);
// Cursor is the previous page's Next. A bad expression, a limit out of
// range or a cursor of another search (or one the chain no longer
// covers) is invalid_argument; a frame of another scope is not found.
type SearchChain struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f"`
	Query   string `msgpack:"qy"`
	Regex   bool   `msgpack:"rx,omitempty"`
	Limit   int    `msgpack:"lm,omitempty"`
	Cursor  string `msgpack:"cu,omitempty"`
}

// SearchHit is one match: the link, the handle or result ("" for a
// goal), the version of the record that holds the text, its kind (goal,
// handle, tool_call, tool_result, summary, result_ref, result) and up to
// 80 bytes of text either side of the match.
type SearchHit struct {
	FrameID string `msgpack:"f"`
	ItemID  string `msgpack:"i,omitempty"`
	Version int64  `msgpack:"v"`
	Kind    string `msgpack:"k"`
	Snippet string `msgpack:"s"`
}

// VersionRange is a range of a scope's versions, both included, and why
// it is named.
type VersionRange struct {
	From    int64  `msgpack:"fr"`
	Through int64  `msgpack:"th"`
	Why     string `msgpack:"w,omitempty"`
}

// SearchChainReply is one page of hits. Next is the cursor of the next
// page ("" after the last). Unsearched names the versions of the chain's
// range no readable record holds. Links are the chain's frame ids, root
// first; Head is the last.
type SearchChainReply struct {
	Result     `msgpack:",inline"`
	Hits       []SearchHit    `msgpack:"h,omitempty"`
	Next       string         `msgpack:"n,omitempty"`
	Unsearched []VersionRange `msgpack:"un,omitempty"`
	Links      []string       `msgpack:"ln"`
	Head       string         `msgpack:"hd"`
}

// Op returns OpSearchChain.
func (*SearchChain) Op() Op { return OpSearchChain }
