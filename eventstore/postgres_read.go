package eventstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Reads of the PostgreSQL store. Each chunk of a walk is one statement,
// and so one snapshot: a stream's row and its records are read together,
// so the chain is checked against a head of the same moment. Chunks are
// bounded like BoltStore's (chunkRecords, chunkBytes): the byte bound is
// computed by the server from the records' sizes, before it sends them.

// pgQuerier is a pool or a transaction.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgRow is a stored record.
type pgRow struct {
	version int64
	seq     uint64
	raw     []byte
}

// pgChunk is one statement's view of a stream (a recordSource).
type pgChunk struct {
	stream  string
	hasRow  bool
	version int64
	headH   Hash
	baseB   Base
	prime   *pgRow // the record before the first one asked for
	recs    []pgRow
	pos     int
	headErr error
}

// sqlStreamChunk reads a stream's row, the record at $2 (the one before
// the walk's first, 0: none) and up to $4 records from version $3 on: a
// record is sent while the records before its predecessor add up to less
// than $5 bytes, so that the chain reader, which stops once it has taken
// $5 bytes or $4-1 records, always finds the successor it checks.
const sqlStreamChunk = `SELECT 0, version, head, base_version, base_hash, 0::bigint FROM si_streams WHERE stream = $1
UNION ALL
SELECT 1, version, record, 0, NULL, seq FROM si_events WHERE stream = $1 AND version = $2
UNION ALL
SELECT 2, version, record, 0, NULL, seq FROM (
	SELECT version, record, seq,
		sum(octet_length(record)) OVER (ORDER BY version ROWS BETWEEN UNBOUNDED PRECEDING AND 2 PRECEDING) AS before
	FROM si_events WHERE stream = $1 AND version >= $3 ORDER BY version LIMIT $4) x
WHERE before IS NULL OR before < $5`

func loadChunk(ctx context.Context, q pgQuerier, stream string, prime, from int64, maxRecs, maxBytes int) (*pgChunk, error) {
	ch := &pgChunk{stream: stream}
	rows, err := q.Query(ctx, sqlStreamChunk, stream, prime, from, maxRecs+1, maxBytes)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			kind     int
			version  int64
			raw      []byte
			base     int64
			baseHash []byte
			seq      int64
		)
		if err := rows.Scan(&kind, &version, &raw, &base, &baseHash, &seq); err != nil {
			return nil, err
		}
		switch kind {
		case 0:
			if version == 0 { // a row an uncommitted append created: no stream yet
				continue
			}
			ch.hasRow, ch.version = true, version
			if len(raw) != len(Hash{}) {
				ch.headErr = corrupt(stream, 0, fmt.Sprintf("the stream's head hash is %d bytes", len(raw)))
			}
			copy(ch.headH[:], raw)
			if base != 0 {
				if base < 1 || len(baseHash) != len(Hash{}) {
					ch.headErr = corrupt(stream, 0, fmt.Sprintf("the stream's base (version %d, %d-byte hash) is malformed", base, len(baseHash)))
				}
				ch.baseB.Version = base
				copy(ch.baseB.Hash[:], baseHash)
			}
		case 1:
			ch.prime = &pgRow{version: version, seq: uint64(seq), raw: raw}
		default:
			ch.recs = append(ch.recs, pgRow{version: version, seq: uint64(seq), raw: raw})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Slice(ch.recs, func(i, j int) bool { return ch.recs[i].version < ch.recs[j].version })
	return ch, nil
}

func (c *pgChunk) head() (int64, Hash, bool, error) {
	if c.headErr != nil {
		return 0, Hash{}, false, c.headErr
	}
	return c.version, c.headH, c.hasRow, nil
}

func (c *pgChunk) get(version int64) ([]byte, bool, error) {
	if c.prime != nil && c.prime.version == version {
		return c.prime.raw, true, nil
	}
	i := sort.Search(len(c.recs), func(i int) bool { return c.recs[i].version >= version })
	if i < len(c.recs) && c.recs[i].version == version {
		return c.recs[i].raw, true, nil
	}
	return nil, false, nil
}

func (c *pgChunk) seek(version int64) (int64, []byte, bool, error) {
	c.pos = sort.Search(len(c.recs), func(i int) bool { return c.recs[i].version >= version })
	return c.entry()
}

func (c *pgChunk) next() (int64, []byte, bool, error) {
	c.pos++
	return c.entry()
}

func (c *pgChunk) entry() (int64, []byte, bool, error) {
	if c.pos >= len(c.recs) {
		return 0, nil, false, nil
	}
	r := &c.recs[c.pos]
	return r.version, r.raw, true, nil
}

func (c *pgChunk) base() (Base, error) {
	if c.headErr != nil {
		return Base{}, c.headErr
	}
	return c.baseB, nil
}

// seqOf returns the sequence column of the record at version (for Verify).
func (c *pgChunk) seqOf(version int64) (uint64, bool) {
	i := sort.Search(len(c.recs), func(i int) bool { return c.recs[i].version >= version })
	if i < len(c.recs) && c.recs[i].version == version {
		return c.recs[i].seq, true
	}
	return 0, false
}

// streamChunk reads and checks the next chunk of cr's walk.
func streamChunk(ctx context.Context, q pgQuerier, cr *chainReader, out []Record, emit bool, maxRecs, maxBytes int) ([]Record, bool, *pgChunk, error) {
	var prime int64
	if !cr.primed && cr.next > 1 {
		prime = cr.next - 1
	}
	ch, err := loadChunk(ctx, q, cr.stream, prime, cr.next, maxRecs, maxBytes)
	if err != nil {
		return out, true, nil, err
	}
	out, end, err := cr.readChunk(ch, out, emit, maxRecs, maxBytes)
	return out, end, ch, err
}

// ReadStream implements Store, with BoltStore's checks: every record is
// checked against the chain before fn sees it. fn runs outside any
// transaction and may call the store.
func (s *PostgresStore) ReadStream(ctx context.Context, stream string, from int64, fn func(Record) error) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	cr := newChainReader(stream, from)
	return deliver(ctx, func(buf []Record) ([]Record, bool, error) {
		if err := s.check(ctx); err != nil {
			return nil, true, err
		}
		out, end, _, err := streamChunk(ctx, s.pool, &cr, buf, true, chunkRecords, chunkBytes)
		return out, end, s.dbErr(ctx, "read stream "+quoteString(stream), err)
	}, fn)
}

// readVersion reads one record with ReadStream's checks (versionReader).
func (s *PostgresStore) readVersion(ctx context.Context, stream string, version int64) ([]Record, error) {
	if err := checkStream(stream); err != nil {
		return nil, err
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	cr := newChainReader(stream, version)
	out, _, _, err := streamChunk(ctx, s.pool, &cr, nil, true, 1, chunkBytes)
	return out, s.dbErr(ctx, "read stream "+quoteString(stream), err)
}

// sqlAllChunk reads up to $2 records from sequence $1 on, stopping once
// the records before one add up to $3 bytes; fetched is how many the limit
// let through before the byte bound.
const sqlAllChunk = `SELECT seq, stream, version, record, fetched FROM (
	SELECT *, count(*) OVER () AS fetched FROM (
		SELECT seq, stream, version, record,
			sum(octet_length(record)) OVER (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
		FROM si_events WHERE seq >= $1 ORDER BY seq LIMIT $2) x) y
WHERE before IS NULL OR before < $3 ORDER BY seq`

// ReadAll implements Store. Each record is checked against its columns
// (stream, version and sequence agree, the envelope decodes). Sequences
// follow each other without gaps, except where RemovePrefix removed
// records: a gap above every removal is reported as corruption, for it
// would mean a reader skipped an event.
func (s *PostgresStore) ReadAll(ctx context.Context, from uint64, fn func(Record) error) error {
	next := max(from, 1)
	var (
		names, types interner
		removed      uint64 // highest removed sequence known (read when a gap needs it)
		haveRemoved  bool
	)
	return deliver(ctx, func(chunk []Record) ([]Record, bool, error) {
		if err := s.check(ctx); err != nil {
			return nil, true, err
		}
		rows, err := s.pool.Query(ctx, sqlAllChunk, int64(min(next, 1<<63-1)), chunkRecords, chunkBytes)
		if err != nil {
			return nil, true, s.dbErr(ctx, "read all", err)
		}
		defer rows.Close()
		var fetched int64
		n := 0
		for rows.Next() {
			var (
				seq, version int64
				stream       []byte
				raw          []byte
			)
			if err := rows.Scan(&seq, &stream, &version, &raw, &fetched); err != nil {
				return nil, true, s.dbErr(ctx, "read all", err)
			}
			n++
			if uint64(seq) != next {
				if !haveRemoved || uint64(seq)-1 > removed {
					if removed, err = s.removedAll(ctx); err != nil {
						return nil, true, err
					}
					haveRemoved = true
				}
				if uint64(seq)-1 > removed {
					return nil, true, corrupt("", 0, fmt.Sprintf("global sequence %d is missing (the next stored is %d) and no removal explains it", next, seq))
				}
			}
			name := names.get(stream)
			var f recordFields
			if err := parseRecord(raw, &f); err != nil {
				return nil, true, recordDecodeError(name, version, err)
			}
			if string(f.stream) != name || f.version != version || f.seq != uint64(seq) || len(f.typ) == 0 {
				return nil, true, corrupt(name, version, fmt.Sprintf(
					"record (stream %s, version %d, sequence %d) disagrees with its row (sequence %d)", quoteString(f.stream), f.version, f.seq, seq))
			}
			chunk = append(chunk, Record{
				Stream:   name,
				Version:  version,
				Seq:      uint64(seq),
				Type:     types.get(f.typ),
				Data:     cloneBytes(f.data),
				PrevHash: f.prev,
				Hash:     sha256.Sum256(raw),
			})
			next = uint64(seq) + 1
		}
		if err := rows.Err(); err != nil {
			return nil, true, s.dbErr(ctx, "read all", err)
		}
		end := n == 0 || (fetched < chunkRecords && int64(n) == fetched)
		return chunk, end, nil
	}, fn)
}

// removedAll is the highest sequence RemovePrefix removed, over all
// streams.
func (s *PostgresStore) removedAll(ctx context.Context) (uint64, error) {
	var hi int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(removed_seq), 0) FROM si_streams`).Scan(&hi)
	return uint64(hi), s.dbErr(ctx, "read removals", err)
}

// Stream implements Store.
func (s *PostgresStore) Stream(ctx context.Context, stream string) (StreamInfo, error) {
	if err := checkStream(stream); err != nil {
		return StreamInfo{}, err
	}
	if err := s.check(ctx); err != nil {
		return StreamInfo{}, err
	}
	info := StreamInfo{Stream: stream}
	var head []byte
	err := s.pool.QueryRow(ctx, `SELECT version, head FROM si_streams WHERE stream = $1 AND version > 0`, stream).Scan(&info.Version, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return info, nil
	}
	if err != nil {
		return StreamInfo{}, s.dbErr(ctx, "read stream "+quoteString(stream), err)
	}
	if len(head) != len(Hash{}) {
		return StreamInfo{}, corrupt(stream, 0, fmt.Sprintf("the stream's head hash is %d bytes", len(head)))
	}
	copy(info.Head[:], head)
	return info, nil
}

// Streams implements Store: in byte order of the names, in chunks; fn runs
// outside any transaction.
func (s *PostgresStore) Streams(ctx context.Context, fn func(StreamInfo) error) error {
	after := "" // every name is above it
	for {
		if err := s.check(ctx); err != nil {
			return err
		}
		rows, err := s.pool.Query(ctx, `SELECT stream, version, head FROM si_streams
WHERE stream > $1 AND version > 0 ORDER BY stream LIMIT $2`, after, chunkRecords)
		if err != nil {
			return s.dbErr(ctx, "list streams", err)
		}
		var chunk []StreamInfo
		for rows.Next() {
			var info StreamInfo
			var head []byte
			if err := rows.Scan(&info.Stream, &info.Version, &head); err != nil {
				rows.Close()
				return s.dbErr(ctx, "list streams", err)
			}
			if len(head) != len(Hash{}) {
				rows.Close()
				return corrupt(info.Stream, 0, fmt.Sprintf("the stream's head hash is %d bytes", len(head)))
			}
			copy(info.Head[:], head)
			chunk = append(chunk, info)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return s.dbErr(ctx, "list streams", err)
		}
		for _, info := range chunk {
			if err := fn(info); err != nil {
				return err
			}
		}
		if len(chunk) < chunkRecords {
			return nil
		}
		after = chunk[len(chunk)-1].Stream
	}
}

// LastSeq implements Store.
func (s *PostgresStore) LastSeq(ctx context.Context) (uint64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var last int64
	err := s.pool.QueryRow(ctx, `SELECT last_seq FROM si_meta WHERE id = 1`).Scan(&last)
	if err != nil {
		return 0, s.dbErr(ctx, "read the last sequence", err)
	}
	return uint64(last), nil
}

// SaveSnapshot implements Store: one statement that checks the version
// against the stream's head (locking its row, so it is ordered with
// appends and removals) and replaces the snapshot, durably. A snapshot
// below the stream's base is not stored (the events after it are gone),
// as with BoltStore.
func (s *PostgresStore) SaveSnapshot(ctx context.Context, stream string, snap Snapshot) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkSnapshot(stream, &snap, &s.opts.Limits); err != nil {
		return err
	}
	raw := encodeSnapshot(nil, stream, &snap)
	var head int64
	ctx, cancel := s.writeCtx(ctx)
	defer cancel()
	err := s.pool.QueryRow(ctx, `WITH s AS (
	SELECT version, base_version FROM si_streams WHERE stream = $1 AND version > 0 FOR SHARE
), w AS (
	INSERT INTO si_snapshots (stream, snapshot) SELECT $1, $2 FROM s WHERE $3 <= s.version AND $3 >= s.base_version
	ON CONFLICT (stream) DO UPDATE SET snapshot = excluded.snapshot RETURNING 1
)
SELECT coalesce((SELECT version FROM s), 0), (SELECT count(*) FROM w)`, stream, raw, snap.Version).Scan(&head, new(int64))
	if err != nil {
		return s.dbErr(ctx, "save snapshot of "+quoteString(stream), err)
	}
	if snap.Version > head {
		return snapshotBeyondHead(stream, snap.Version, head)
	}
	return nil
}

// LoadSnapshot implements Store. A snapshot whose checksum fails, or that
// claims a version beyond the stream's head, is a *CorruptionError.
func (s *PostgresStore) LoadSnapshot(ctx context.Context, stream string) (Snapshot, bool, error) {
	if err := checkStream(stream); err != nil {
		return Snapshot{}, false, err
	}
	if err := s.check(ctx); err != nil {
		return Snapshot{}, false, err
	}
	var raw []byte
	var head int64
	err := s.pool.QueryRow(ctx, `SELECT n.snapshot, coalesce(s.version, 0) FROM si_snapshots n
LEFT JOIN si_streams s ON s.stream = n.stream WHERE n.stream = $1`, stream).Scan(&raw, &head)
	if errors.Is(err, pgx.ErrNoRows) {
		return Snapshot{}, false, nil
	}
	if err != nil {
		return Snapshot{}, false, s.dbErr(ctx, "load snapshot of "+quoteString(stream), err)
	}
	snap, err := decodeSnapshot(stream, raw)
	if err != nil {
		return Snapshot{}, false, err
	}
	if snap.Version > head {
		return Snapshot{}, false, corrupt(stream, 0, fmt.Sprintf("snapshot covers version %d but the stream's head is %d", snap.Version, head))
	}
	return snap, true, nil
}

// readOnly runs fn in a read-only REPEATABLE READ transaction: one
// snapshot for all its statements.
func (s *PostgresStore) readOnly(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// VerifyStream implements Store: the whole chain, checked against the
// stream's row, in one snapshot.
func (s *PostgresStore) VerifyStream(ctx context.Context, stream string) error {
	if err := checkStream(stream); err != nil {
		return err
	}
	if err := s.check(ctx); err != nil {
		return err
	}
	err := s.readOnly(ctx, func(tx pgx.Tx) error {
		cr := newChainReader(stream, 1)
		return verifyPgChain(ctx, tx, &cr, nil)
	})
	return s.dbErr(ctx, "verify "+quoteString(stream), err)
}

// verifyPgChain walks a whole chain within one transaction; check, if
// set, sees each chunk after it was checked.
func verifyPgChain(ctx context.Context, tx pgx.Tx, cr *chainReader, check func(*pgChunk) error) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, end, ch, err := streamChunk(ctx, tx, cr, nil, false, chunkRecords, chunkBytes)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(ch); err != nil {
				return err
			}
		}
		if end {
			return nil
		}
	}
}

// Lookup implements Store.
func (s *PostgresStore) Lookup(ctx context.Context, stream, key string) (Span, bool, error) {
	if err := checkStream(stream); err != nil {
		return Span{}, false, err
	}
	if err := s.check(ctx); err != nil {
		return Span{}, false, err
	}
	var sp Span
	err := s.pool.QueryRow(ctx, `SELECT first_version, last_version FROM si_index WHERE stream = $1 AND key = $2`,
		stream, []byte(key)).Scan(&sp.First, &sp.Last)
	if errors.Is(err, pgx.ErrNoRows) {
		return Span{}, false, nil
	}
	if err != nil {
		return Span{}, false, s.dbErr(ctx, "index lookup", err)
	}
	if sp.First < 1 || sp.Last < sp.First {
		return Span{}, false, corrupt(stream, 0, fmt.Sprintf("index entry %s spans versions %d..%d", quoteString(key), sp.First, sp.Last))
	}
	return sp, true, nil
}
