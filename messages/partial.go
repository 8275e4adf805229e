package messages

// Partial output (frames/partial.go has the rules): a frame's model output
// recorded chunk by chunk as it streams, so that an actor that restarts
// mid-stream finds what the model had said (ResumeActor's Outputs).

// RecordPartialOutput appends a chunk of frame FrameID's model output (the
// top of the stack when empty): Delta, the text the chunk adds (valid
// UTF-8, at most 64 KiB; the whole output at most the server's content
// limit, 256 KiB by default), Percent, the completion percentage (0..100),
// and Final on the chunk that completes the output (the state schema's
// is_partial becomes false). Start begins a new output, replacing the
// frame's in-progress one (a retried model call). The frame's next
// RecordUsage that records a turn, or its end, ends the output; a
// continuation takes it along to the new link. Cheap enough for every
// streamed chunk: a busy scope's waiting chunks share one durable append.
type RecordPartialOutput struct {
	Header  `msgpack:",inline"`
	FrameID string `msgpack:"f,omitempty"`
	Delta   string `msgpack:"d"`
	Percent int64  `msgpack:"pc,omitempty"`
	Final   bool   `msgpack:"fi,omitempty"`
	Start   bool   `msgpack:"st,omitempty"`
}

// RecordPartialOutputReply says where the chunk went: its number in the
// output (1: it started one), the output's length in bytes after it, and
// whether the output is still partial.
type RecordPartialOutputReply struct {
	Result    `msgpack:",inline"`
	FrameID   string `msgpack:"f"`
	Chunk     int64  `msgpack:"n"`
	Bytes     int64  `msgpack:"b"`
	IsPartial bool   `msgpack:"p"`
	Percent   int64  `msgpack:"pc"`
}

// Op returns OpRecordPartialOutput.
func (*RecordPartialOutput) Op() Op { return OpRecordPartialOutput }

// Mut returns the header of a mutating request.
func (r *RecordPartialOutput) Mut() *Header { return &r.Header }
