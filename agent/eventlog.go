package agent

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
)

// How events become durable. While a run streams, its events are stored in
// batches: at each message_end (synchronously, so the log covers every
// message the transcript holds), whenever FlushInterval has passed since
// the first event that is not stored yet, and whenever FlushBatch events
// wait. A batch is one row of the store. The timed and the size-triggered
// batches are stored in the background, so a run does not stop streaming
// while the store writes; only when the store falls maxUnstoredBatches
// batches behind does the run wait for it. agent_end reaches followers
// only after the last batch is stored, so a client that saw a run finish
// replays every one of its events after a crash.
//
// The events of the last batches may still be lost to a crash; a client
// may have seen them. So that the agent_end that closes such a run (see
// repair) comes after every seq a client saw, the log reserves seqs in the
// store before it streams them. A run starts with the reservation its
// start recorded (persistence.StartReservedSeq); later ones
// (persistence.Store.ReserveEvents) take reserveStep seqs at a time, the
// next starting in the background when half of one is used, so a run
// never waits for it unless the store falls that far behind. An event
// past the reservation (the store failed) reaches followers once it is
// stored.
const (
	FlushInterval = 250 * time.Millisecond
	FlushBatch    = 4096
)

// maxUnstoredBatches bounds how far the store may fall behind a run, in
// batches of FlushBatch events.
const maxUnstoredBatches = 4

// reserveStep is how many seqs past its newest event a run's log reserves
// at a time: one store write per reserveStep/2 events.
const reserveStep = maxUnstoredBatches * FlushBatch

// tailChunkSize is how many events one chunk of a log's tail holds.
const tailChunkSize = 512

// firstChunkCap is the room a chunk of a short run's tail starts with.
const firstChunkCap = 16

// followerWindow is how many events a run may produce beyond what its
// slowest connected follower has sent. It keeps event latency bounded when
// runs produce faster than clients read (the loop waits instead of queueing
// without end); a follower that disconnects, or reads older events back
// from the store, never holds the run back.
const followerWindow = 256

// Event is one event of a run's log, as a follower receives it.
type Event struct {
	// Seq is the event's position in its run, from 1.
	Seq uint64
	// Data is the binary protobuf of the agentdv1.AgentEvent, as it is
	// stored and sent: a follower sends it without encoding it again. Never
	// modified once logged.
	Data []byte
	// Time is when the run produced the event; zero for events read back
	// from the store.
	Time time.Time
	// End says the event is agent_end, the last of its run.
	End bool
	// delta holds the facts of an event that is a streamed delta (Kind
	// is zero for any other), which the store may keep instead of Data.
	delta persistence.Delta
}

// Decode returns the event as a message.
func (e Event) Decode() (*agentdv1.AgentEvent, error) {
	ev := &agentdv1.AgentEvent{}
	return ev, proto.Unmarshal(e.Data, ev)
}

// agentEndField is the field number of AgentEvent.agent_end.
var agentEndField = (&agentdv1.AgentEvent{}).ProtoReflect().Descriptor().Fields().ByName("agent_end").Number()

// isAgentEnd reports whether an encoded AgentEvent is agent_end, reading
// only its top-level field tags.
func isAgentEnd(data []byte) bool {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		if num == agentEndField {
			return true
		}
		data = data[n:]
		if n = protowire.ConsumeFieldValue(num, typ, data); n < 0 {
			return false
		}
		data = data[n:]
	}
	return false
}

// eventEncoder encodes a run's logged events. A streamed delta, nearly
// every event of a run, takes vtprotobuf's generated marshaller (the same
// bytes as proto.Marshal at about a third of the cost, measured in
// BenchmarkEncodeEvent), and its facts come back so the store can keep
// them instead of the bytes (persistence.Event.Delta). Every other event
// goes through proto.Marshal, which refuses invalid UTF-8 anywhere in it.
//
// Deltas are encoded side by side into slabs of eventSlabBytes: one
// allocation per hundred or so deltas instead of one each. A slab lives
// while any of its events does (in the log's tail, or being sent); the
// encodings are never written again, so sharing a slab is safe. Not safe
// for concurrent use (the log encodes under its lock).
type eventEncoder struct {
	slab []byte
}

const (
	// eventSlabBytes is the size of one slab of delta encodings.
	eventSlabBytes = 8 << 10
	// maxSlabbedEvent is the longest encoding carved from a slab; a longer
	// delta gets its own allocation, so one long delta never strands most
	// of a slab.
	maxSlabbedEvent = 512
)

// encode encodes ev as described on [eventEncoder]. The returned bytes
// must not be modified.
func (e *eventEncoder) encode(ev *agentdv1.AgentEvent) ([]byte, persistence.Delta, error) {
	d, ok := persistence.DeltaOf(ev)
	if !ok {
		data, err := proto.Marshal(ev)
		return data, persistence.Delta{}, err
	}
	n := ev.SizeVT()
	if n > maxSlabbedEvent {
		data, err := ev.MarshalVT()
		return data, d, err
	}
	if cap(e.slab)-len(e.slab) < n {
		e.slab = make([]byte, 0, eventSlabBytes)
	}
	start := len(e.slab)
	// The capacity stops at the event's end: nothing appended to the
	// returned slice can reach the next event.
	data := e.slab[start : start+n : start+n]
	if _, err := ev.MarshalToSizedBufferVT(data); err != nil {
		return nil, d, err
	}
	e.slab = e.slab[:start+n]
	return data, d, nil
}

// eventLog is the event log of one active run: the events not stored yet
// and the newest stored ones, in seq order, with a wake-up for followers.
// Older events are read back from the store.
// setTraceID stamps the run's events with its trace (when valid); called
// before the run logs anything.
func (l *eventLog) setTraceID(id trace.TraceID) {
	if id.IsValid() {
		l.traceID = id[:]
	}
}

type eventLog struct {
	// store is where batches go: the store, or the run's claim on it.
	store            persistence.RunWriter
	logger           *slog.Logger
	sessionID, runID string
	traceID          []byte // the run's trace, set before its first event

	mu sync.Mutex
	// encoder encodes the events this log appends (under mu).
	encoder eventEncoder
	// tail holds the events of seqs first..next-1 in chunks of
	// tailChunkSize, dropped whole once stored and sent (trimLocked). A
	// short run's chunk grows as it fills; a long run's are made whole and
	// filled in place, so its appends never copy. Logged events
	// are never modified: a follower reads a chunk's events while more
	// are added, even from a copy the chunk outgrew.
	tail    [][]Event
	first   uint64 // seq of tail[0][0], or next when the tail is empty
	next    uint64 // seq the next event gets
	durable uint64 // last seq stored
	// reserved is the last seq reserved in the store: followers see the
	// events up to max(durable, reserved) (see released for agent_end).
	reserved uint64
	// reserving says a reservation is being stored; retrying, that one
	// failed and the next is due after FlushInterval.
	reserving, retrying bool
	ended               bool
	// released says followers may see agent_end: it is stored, or storing
	// it failed for good (storeLastEvents gave up). Until then a client
	// that saw the run finish could lose its last events to a crash.
	released bool
	waiting  bool
	wake     chan struct{}
	armed    bool // a timed flush is pending
	sizing   bool // a size-triggered flush is running
	// armedDurable is durable when the pending timed flush was set.
	armedDurable uint64

	// followers maps each follower reading from the tail to the last seq
	// it sent; room is signalled when one makes progress or leaves.
	followers  map[*int]uint64
	room       *sync.Cond
	unthrottle bool

	// flushMu makes flushes one at a time, in seq order.
	flushMu sync.Mutex
}

func newEventLog(store persistence.RunWriter, logger *slog.Logger, sessionID, runID string) *eventLog {
	l := &eventLog{store: store, logger: logger, sessionID: sessionID, runID: runID, first: 1, next: 1,
		wake: make(chan struct{}), followers: map[*int]uint64{}}
	l.room = sync.NewCond(&l.mu)
	return l
}

// stopThrottling lets appends proceed whatever followers do, for a run that
// is being aborted: its last events must not wait for a stalled client.
func (l *eventLog) stopThrottling() {
	l.mu.Lock()
	l.unthrottle = true
	l.room.Broadcast()
	l.mu.Unlock()
}

// join registers a follower reading from the tail that has sent everything
// up to seq after.
func (l *eventLog) join(after uint64) *int {
	id := new(int)
	l.mu.Lock()
	l.followers[id] = after
	l.mu.Unlock()
	return id
}

// progress records that a follower has sent everything up to seq.
func (l *eventLog) progress(id *int, seq uint64) {
	l.mu.Lock()
	l.followers[id] = seq
	l.room.Broadcast()
	l.mu.Unlock()
}

// leave unregisters a follower.
func (l *eventLog) leave(id *int) {
	l.mu.Lock()
	delete(l.followers, id)
	l.room.Broadcast()
	l.mu.Unlock()
}

// lagLocked is how far the slowest follower is behind the log's end.
func (l *eventLog) lagLocked() uint64 {
	var lag uint64
	for _, sent := range l.followers {
		lag = max(lag, l.next-1-sent)
	}
	return lag
}

// append stamps the event with the run's identity and the next seq, logs
// it and wakes followers; it first waits while the slowest follower lags
// more than followerWindow events. Nothing is appended before agent_start
// or after agent_end. The log owns the event from now on: nobody changes
// it. append reports whether the event was logged.
func (l *eventLog) append(ev *agentdv1.AgentEvent) (logged bool) {
	return l.appendThen(ev, nil)
}

// appendThen is append, calling beforeVisible (when not nil) once ev has
// its seq and before any follower can read it: what a client must find
// once it has seen ev (the request among the pending interactions) is in
// place by then. beforeVisible runs under the log's lock, so it must not
// touch the log.
func (l *eventLog) appendThen(ev *agentdv1.AgentEvent, beforeVisible func()) (logged bool) {
	l.mu.Lock()
	for {
		for !l.unthrottle && l.lagLocked() >= followerWindow {
			l.room.Wait()
		}
		if l.ended || (l.next == 1) != (ev.GetAgentStart() != nil) {
			// agent_start is the first event of a run, and only the first,
			// and agent_end the last: a queue_update racing with either is
			// dropped, as is a second agent_start (the loop announces the
			// queue when it takes from it, and a message queued too late is
			// reported as undelivered before agent_end).
			l.mu.Unlock()
			return false
		}
		if l.next <= l.reserved || l.reserving || l.retrying || ev.GetAgentEnd() != nil {
			break
		}
		// The event would stream past the reservation (the run's first
		// event, or a store far behind): reserve before logging it.
		l.reserving = true
		through := l.next - 1 + reserveStep
		l.mu.Unlock()
		err := l.store.ReserveEvents(context.Background(), l.runID, through)
		l.mu.Lock()
		l.reservedLocked(through, err)
	}
	ev.SessionId, ev.RunId, ev.Seq, ev.TraceId = l.sessionID, l.runID, l.next, l.traceID
	data, delta, err := l.encoder.encode(ev)
	if err != nil {
		// Generated messages always encode; an invalid UTF-8 string from a
		// broken provider is the one way this fails. Replace it by an
		// error event rather than leave a gap in the seqs.
		delta = persistence.Delta{}
		l.logger.Error("cannot encode an event; logging an error event instead", "session", l.sessionID, "run", l.runID, "err", err)
		data, _ = proto.Marshal(&agentdv1.AgentEvent{SessionId: l.sessionID, RunId: l.runID, Seq: l.next, Time: ev.GetTime(),
			Event: &agentdv1.AgentEvent_Error{Error: &agentdv1.AgentError{Stage: "encode", Message: "an event could not be encoded: " + err.Error()}}})
	}
	end := ev.GetAgentEnd() != nil
	if n := len(l.tail); n == 0 || len(l.tail[n-1]) == tailChunkSize {
		// Until a run has logged a chunk's worth, its chunks start small
		// and grow as they fill: most runs log a few hundred events, and a
		// thousand of them at once would hold a thousand mostly empty
		// chunks for the collector to clear and scan. A run that streams
		// long gets whole chunks, so its appends no longer copy.
		size := tailChunkSize
		if l.next <= tailChunkSize {
			size = firstChunkCap
		}
		l.tail = append(l.tail, make([]Event, 0, size))
	}
	last := &l.tail[len(l.tail)-1]
	*last = append(*last, Event{Seq: l.next, Data: data, Time: ev.GetTime().AsTime(), End: end, delta: delta})
	l.next++
	if end {
		l.ended = true
	}
	if beforeVisible != nil {
		beforeVisible()
	}
	l.wakeLocked()
	arm := !l.armed && !end
	if arm {
		l.armed, l.armedDurable = true, l.durable
	}
	unstored := l.next - 1 - l.durable
	sized := !l.sizing && unstored >= FlushBatch
	l.sizing = l.sizing || sized
	behind := unstored >= maxUnstoredBatches*FlushBatch
	reserve := !end && l.reserveDueLocked()
	if reserve {
		l.reserving = true
	}
	through := l.next - 1 + reserveStep
	l.mu.Unlock()
	if reserve {
		go l.reserve(through)
	}
	if arm {
		time.AfterFunc(FlushInterval, l.timedFlush)
	}
	if sized {
		go l.sizeFlush()
	}
	if behind {
		l.flushOrWarn()
	}
	return true
}

// reserveDueLocked reports whether the log should reserve more seqs: half
// of the reservation is used, and no reservation is being stored or due.
func (l *eventLog) reserveDueLocked() bool {
	return !l.reserving && !l.retrying && !l.ended && !l.released && l.next-1+reserveStep/2 > l.reserved
}

// startReserved records the reservation the store made when it recorded
// the run's start (persistence.StartReservedSeq): the run's first events
// reach followers without waiting for a reservation of their own.
func (l *eventLog) startReserved() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reservedLocked(persistence.StartReservedSeq, nil)
}

// reserve stores a reservation up to seq through in the background.
func (l *eventLog) reserve(through uint64) {
	err := l.store.ReserveEvents(context.Background(), l.runID, through)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reservedLocked(through, err)
}

// reservedLocked records how storing a reservation up to seq through
// went: it shows followers the events it covers, or, when it failed,
// retries after FlushInterval (meanwhile the events past the reservation
// reach followers as they are stored).
func (l *eventLog) reservedLocked(through uint64, err error) {
	l.reserving = false
	if err != nil {
		l.logger.Warn("could not reserve event seqs; the run's newest events reach clients once stored", "session", l.sessionID, "run", l.runID, "through", through, "err", err)
		if !l.retrying {
			l.retrying = true
			time.AfterFunc(FlushInterval, l.retryReserve)
		}
		return
	}
	if through > l.reserved {
		l.reserved = through
		l.wakeLocked()
	}
}

// retryReserve reserves again after a reservation failed.
func (l *eventLog) retryReserve() {
	l.mu.Lock()
	l.retrying = false
	reserve := l.reserveDueLocked()
	if reserve {
		l.reserving = true
	}
	through := l.next - 1 + reserveStep
	l.mu.Unlock()
	if reserve {
		l.reserve(through)
	}
}

// wakeLocked wakes the followers waiting for events.
func (l *eventLog) wakeLocked() {
	if l.waiting {
		close(l.wake)
		l.wake = make(chan struct{})
		l.waiting = false
	}
}

// started reports whether agent_start is logged.
func (l *eventLog) started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next > 1
}

// timedFlush stores what waits once its oldest event is FlushInterval
// old. The timer was set by the first event after a batch; when a batch
// stored since (at a message_end) left only younger events, it waits for
// them instead: a run that reaches a message_end at least every
// FlushInterval stores nothing but those batches.
func (l *eventLog) timedFlush() {
	l.mu.Lock()
	if from := l.durable + 1; l.durable > l.armedDurable && from < l.next && from >= l.first {
		chunk, i := l.chunkLocked(from)
		// The event's time is the run's clock, which may run ahead: a wait
		// is at most FlushInterval, and the next one needs another batch.
		if wait := FlushInterval - time.Since(chunk[i].Time); wait > 0 {
			l.armedDurable = l.durable
			time.AfterFunc(min(wait, FlushInterval), l.timedFlush)
			l.mu.Unlock()
			return
		}
	}
	l.armed = false
	l.mu.Unlock()
	l.flushOrWarn()
}

// sizeFlush stores what waits once FlushBatch events do.
func (l *eventLog) sizeFlush() {
	l.flushOrWarn()
	l.mu.Lock()
	l.sizing = false
	l.mu.Unlock()
}

// flushOrWarn stores what waits; a failure is logged, and the events are
// stored with the next batch.
func (l *eventLog) flushOrWarn() {
	if err := l.flush(context.Background()); err != nil {
		l.logger.Warn("could not store a batch of events; retrying with the next one", "session", l.sessionID, "run", l.runID, "err", err)
	}
}

// flush stores the events not stored yet, as one batch, and then drops the
// stored ones no follower reads from memory any more.
func (l *eventLog) flush(ctx context.Context) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	from := l.durable + 1
	if from >= l.next {
		l.mu.Unlock()
		return nil
	}
	batch := make([]persistence.Event, 0, l.next-from)
	for seq := from; seq < l.next; {
		chunk, i := l.chunkLocked(seq)
		for ; i < len(chunk); i++ {
			e := &chunk[i]
			batch = append(batch, persistence.Event{Seq: e.Seq, Data: e.Data})
			if e.delta.Kind != 0 {
				// The tail's events are never modified once logged.
				batch[len(batch)-1].Delta = &e.delta
			}
		}
		seq = chunk[len(chunk)-1].Seq + 1
	}
	l.mu.Unlock()
	if err := l.store.AppendEvents(context.WithoutCancel(ctx), l.runID, batch); err != nil {
		return err
	}
	l.mu.Lock()
	l.durable = batch[len(batch)-1].Seq
	if l.durable > l.reserved {
		l.wakeLocked() // stored events past the reservation may be shown now
	}
	if l.ended && l.durable == l.next-1 {
		l.releaseLocked()
	}
	l.trimLocked()
	l.mu.Unlock()
	return nil
}

// release lets followers see agent_end although it is not stored: for a
// run whose last events could not be stored, so its clients still end.
func (l *eventLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
}

func (l *eventLog) releaseLocked() {
	if l.released {
		return
	}
	l.released = true
	l.wakeLocked()
}

// trimLocked drops the chunks of stored events that every follower
// reading from memory has sent. A follower still sending a dropped
// chunk's events keeps them; nobody modifies them.
func (l *eventLog) trimLocked() {
	sent := l.durable
	for _, s := range l.followers {
		sent = min(sent, s)
	}
	drop := 0
	for drop < len(l.tail) && l.tail[drop][len(l.tail[drop])-1].Seq <= sent {
		drop++
	}
	if drop == 0 {
		return
	}
	l.tail = slices.Delete(l.tail, 0, drop)
	l.first = l.next
	if len(l.tail) > 0 {
		l.first = l.tail[0][0].Seq
	}
}

// chunkLocked returns the chunk of the tail that holds seq (first <= seq <
// next) and seq's index in it. Every chunk but the last is full.
func (l *eventLog) chunkLocked(seq uint64) ([]Event, int) {
	at := seq - l.first
	return l.tail[at/tailChunkSize], int(at % tailChunkSize)
}

// isEnded reports whether agent_end is in the log.
func (l *eventLog) isEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// shownLocked is the last seq followers may see: every event once the
// log is released, otherwise those stored or reserved, but agent_end only
// once it is stored (see released).
func (l *eventLog) shownLocked() uint64 {
	if l.released {
		return l.next - 1
	}
	shown := max(l.durable, l.reserved)
	if l.ended {
		shown = min(shown, l.next-2)
	}
	return min(shown, l.next-1)
}

// since returns the events after seq after that are in memory (read-only;
// those of one chunk of the tail at most, so call it again for more),
// whether the run has ended with them, and a channel closed when more
// arrive. inStore says the events right after after are no longer in
// memory: read them from the store (they are stored) up to seq first-1.
func (l *eventLog) since(after uint64) (evs []Event, ended bool, wake <-chan struct{}, inStore bool, first uint64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after >= l.next {
		return nil, false, nil, false, 0, refuse(agentdv1.ErrorReason_ERROR_REASON_SEQ_OUT_OF_RANGE, "after_seq %d is beyond the last event of run %q (seq %d)", after, l.runID, l.next-1)
	}
	if after+1 < l.first {
		return nil, false, nil, true, l.first, nil
	}
	if after+1 < l.next {
		chunk, i := l.chunkLocked(after + 1)
		evs = chunk[i:]
	}
	if shown := l.shownLocked(); shown < l.next-1 {
		evs = evs[:min(uint64(len(evs)), max(shown, after)-after)]
	}
	ended = l.ended && l.released
	if len(evs) == 0 {
		l.waiting = true
	}
	return evs, ended, l.wake, false, l.first, nil
}
