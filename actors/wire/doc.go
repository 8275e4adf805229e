// Package wire carries StateIndex messages across Proto.Actor remoting.
//
// Proto.Actor puts protobuf messages on the wire, and it lets a root message
// choose its own wire form through remote.RootSerializable and
// remote.RootSerialized. Every typed request and reply of package messages
// therefore travels as a *Message (the in-process side) inside one small
// protobuf Envelope (the wire side): a registered type name and the msgpack
// encoding of the struct. Package messages stays plain Go structs; this is
// the only package that knows protobuf.
//
// The msgpack is the store's (eventstore.Marshal): the same bytes, so peers
// of every release read each other. The hottest types (GetStack and its
// reply) are encoded and decoded by hand (fast.go) into exactly those bytes;
// whatever that decoder does not expect goes to the reflection decoder.
//
// What it must never do:
//
//   - fail Deserialize: Proto.Actor's endpoint reader closes the whole
//     connection on a deserialization error. An unknown type name or a
//     corrupt payload becomes a *Message whose Err says so, and the
//     receiver answers it with a bad_request reply;
//   - fail Serialize: the endpoint writer drops such a message silently and
//     the caller waits out its timeout. Encode does all the work up front
//     (encoding, the size limit) and reports errors to its caller, so what
//     reaches the writer is already bytes;
//   - let a message over the limit (DefaultMaxBytes, 1 MiB, configurable)
//     reach gRPC, whose own limit would break the connection instead of
//     failing one request.
//
// Send *Message values (pointers): Proto.Actor drops a value type.
package wire
