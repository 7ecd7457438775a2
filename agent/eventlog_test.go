package agent

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	agentdv1 "github.com/agentd/agentd/gen/go/agentd/v1"
	"github.com/agentd/agentd/persistence"
	"github.com/agentd/agentd/persistence/memory"
)

func turnStart() *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_TurnStart{TurnStart: &agentdv1.TurnStart{}}}
}

func agentStart() *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentStart{AgentStart: &agentdv1.AgentStart{}}}
}

func agentEnd() *agentdv1.AgentEvent {
	return &agentdv1.AgentEvent{Event: &agentdv1.AgentEvent_AgentEnd{AgentEnd: &agentdv1.AgentEnd{}}}
}

// newTestLog returns the log of a started run in a fresh memory store.
func newTestLog(t *testing.T) (*eventLog, persistence.Store) {
	t.Helper()
	store := memory.New()
	ctx := context.Background()
	sess, err := store.CreateSession(ctx, persistence.CreateSessionParams{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.StartRun(ctx, sess.ID, "r", nil); err != nil {
		t.Fatal(err)
	}
	return newEventLog(store, slog.New(slog.NewTextHandler(io.Discard, nil)), sess.ID, "r"), store
}

func TestEventLogOrderAndEnds(t *testing.T) {
	l, _ := newTestLog(t)
	if l.append(turnStart()) {
		t.Fatal("an event before agent_start was logged")
	}
	l.append(agentStart())
	startData := l.tail[0][0].Data
	for range 4 {
		l.append(turnStart())
	}
	evs, ended, _, inStore, _, err := l.since(2)
	if err != nil || ended || inStore || len(evs) != 3 || evs[0].Seq != 3 || evs[2].Seq != 5 {
		t.Fatalf("since(2) = %d events from seq %d, ended %v, in store %v, %v", len(evs), evs[0].Seq, ended, inStore, err)
	}
	if _, _, _, _, _, err := l.since(9); err == nil {
		t.Fatal("since(9) beyond the end succeeded")
	}
	_, _, wake, _, _, _ := l.since(5)
	l.append(agentEnd())
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting follower was not woken")
	}
	if l.append(turnStart()) {
		t.Fatal("an event after agent_end was logged")
	}
	// agent_end reaches followers only once it is stored: a client that
	// saw the run end must find every event again after a crash.
	evs, ended, wake, _, _, _ = l.since(5)
	if ended || len(evs) != 0 {
		t.Fatalf("agent_end not stored yet, but since(5) = %v ended=%v", evs, ended)
	}
	me := l.join(5) // a follower keeps the stored events in memory
	defer l.leave(me)
	if err := l.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("storing agent_end did not wake the waiting follower")
	}
	evs, ended, _, _, _, _ = l.since(5)
	if !ended || len(evs) != 1 || !evs[0].End || evs[0].Seq != 6 {
		t.Fatalf("after agent_end was stored: %v ended=%v", evs, ended)
	}
	ev, err := evs[0].Decode()
	if err != nil || ev.GetRunId() != "r" || ev.GetSeq() != 6 || ev.GetAgentEnd() == nil || !isAgentEnd(evs[0].Data) || isAgentEnd(startData) {
		t.Fatalf("decoded %v, %v", ev, err)
	}
}

// A run whose last events cannot be stored still ends its followers.
func TestEventLogReleasesAnUnstoredEnd(t *testing.T) {
	l, _ := newTestLog(t)
	l.append(agentStart())
	l.append(agentEnd())
	if evs, ended, _, _, _, _ := l.since(1); ended || len(evs) != 0 {
		t.Fatalf("unstored agent_end visible: %v ended=%v", evs, ended)
	}
	l.release()
	if evs, ended, _, _, _, _ := l.since(1); !ended || len(evs) != 1 || !evs[0].End {
		t.Fatalf("released agent_end: %v ended=%v", evs, ended)
	}
}

// Stored events are dropped from memory once no follower reads them there;
// a follower that is behind reads them back from the store.
func TestEventLogKeepsOnlyWhatIsNotStoredOrStillRead(t *testing.T) {
	l, store := newTestLog(t)
	l.append(agentStart())
	for range 999 {
		l.append(turnStart())
	}
	if n := l.inMemory(); n != 1000 {
		t.Fatalf("%d events in memory before a flush", n)
	}
	if err := l.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := l.inMemory(); n != 0 || l.first != 1001 {
		t.Fatalf("after the flush %d events are in memory from seq %d; want none", n, l.first)
	}
	_, _, _, inStore, first, err := l.since(10)
	if err != nil || !inStore || first != 1001 {
		t.Fatalf("since(10) = in store %v up to %d, %v", inStore, first, err)
	}
	stored, err := store.Events(context.Background(), "r", 10, 5000)
	if err != nil || len(stored) != 990 || stored[0].Seq != 11 {
		t.Fatalf("stored: %d events from %d, %v", len(stored), stored[0].Seq, err)
	}

	// A follower reading from memory keeps what it has not sent, a chunk
	// of the tail at a time.
	me := l.join(1000)
	for i := range uint64(tailChunkSize + 10) {
		l.append(turnStart())
		// Keep up, so the window never holds the log back.
		l.progress(me, min(1001+i, 1000+tailChunkSize-1))
	}
	if err := l.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.first != 1001 || l.inMemory() != tailChunkSize+10 {
		t.Fatalf("with a follower one event short of a chunk: memory holds %d events from %d", l.inMemory(), l.first)
	}
	l.progress(me, 1000+tailChunkSize)
	l.append(turnStart()) // the next flush trims
	if err := l.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.first != 1001+tailChunkSize || l.inMemory() != 11 {
		t.Fatalf("with a follower through a chunk: memory holds %d events from %d", l.inMemory(), l.first)
	}
	evs, _, _, inStore, _, err := l.since(1000 + tailChunkSize)
	if err != nil || inStore || len(evs) != 11 || evs[0].Seq != 1001+tailChunkSize {
		t.Fatalf("since the chunk's end: %d events, in store %v, %v", len(evs), inStore, err)
	}
	l.leave(me)
}

// inMemory is how many events the log's tail holds.
func (l *eventLog) inMemory() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, chunk := range l.tail {
		n += len(chunk)
	}
	return n
}

// A follower reads the tail a chunk at a time, every event once, in order,
// also from a seq in the middle of a chunk.
func TestEventLogSinceReadsAcrossChunks(t *testing.T) {
	l, _ := newTestLog(t)
	l.append(agentStart())
	for range 3*tailChunkSize + 7 {
		l.append(turnStart())
	}
	l.release()
	for _, from := range []uint64{0, 5, tailChunkSize - 1, tailChunkSize, 2*tailChunkSize + 3} {
		after, reads := from, 0
		for {
			evs, _, _, inStore, _, err := l.since(after)
			if err != nil || inStore {
				t.Fatalf("since(%d): in store %v, %v", after, inStore, err)
			}
			if len(evs) == 0 {
				break
			}
			for _, e := range evs {
				if e.Seq != after+1 {
					t.Fatalf("from %d: seq %d after %d", from, e.Seq, after)
				}
				after = e.Seq
			}
			reads++
		}
		if want := uint64(3*tailChunkSize + 8); after != want {
			t.Fatalf("from %d: read through %d, want %d", from, after, want)
		}
		if reads > 4 {
			t.Fatalf("from %d: %d reads for 4 chunks", from, reads)
		}
	}
}

func TestEventLogWaitsForASlowFollower(t *testing.T) {
	l, _ := newTestLog(t)
	me := l.join(0)
	l.append(agentStart())
	for range followerWindow - 1 {
		l.append(turnStart())
	}
	appended := make(chan struct{})
	go func() {
		l.append(turnStart())
		close(appended)
	}()
	select {
	case <-appended:
		t.Fatal("append went past a follower lagging by the whole window")
	case <-time.After(50 * time.Millisecond):
	}
	l.progress(me, 10)
	select {
	case <-appended:
	case <-time.After(5 * time.Second):
		t.Fatal("progress did not release the producer")
	}
	// A follower that leaves never holds the run back.
	done := make(chan struct{})
	go func() {
		for range 2 * followerWindow {
			l.append(turnStart())
		}
		close(done)
	}()
	time.Sleep(20 * time.Millisecond)
	l.leave(me)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a follower that left still holds the producer")
	}
	// Nor does an aborted run wait.
	other := l.join(l.next - 1)
	l.stopThrottling()
	for range 2 * followerWindow {
		l.append(turnStart())
	}
	l.leave(other)
	l.flush(context.Background())
}

// The events a run logs are stored at the latest FlushInterval after the
// first of them, without a message_end.
func TestEventLogTimedFlush(t *testing.T) {
	l, store := newTestLog(t)
	l.append(agentStart())
	l.append(turnStart())
	waitStored(t, store, 2)
}

// waitStored waits up to 5 s for the test run's first n events to be
// stored.
func waitStored(t *testing.T, store persistence.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stored, err := store.Events(context.Background(), "r", 0, n+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s only %d of %d events are stored", len(stored), n)
		}
	}
}

// batchTimesStore records when each batch of events was stored and the
// seq it ended with.
type batchTimesStore struct {
	persistence.Store
	mu      sync.Mutex
	batches []storedBatch
}

type storedBatch struct {
	at   time.Time
	last uint64
}

func (s *batchTimesStore) AppendEvents(ctx context.Context, runID string, events []persistence.Event) error {
	err := s.Store.AppendEvents(ctx, runID, events)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, storedBatch{time.Now(), events[len(events)-1].Seq})
	return err
}

func (s *batchTimesStore) stored() []storedBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

// A batch stored at a message_end restarts the wait: the events after it
// are stored once the oldest of them is FlushInterval old, not when the
// timer the first events set goes off, so a run that stores a batch at
// least every FlushInterval stores no others.
func TestEventLogTimedFlushWaitsForTheOldestUnstoredEvent(t *testing.T) {
	l, store := newTestLog(t)
	batches := &batchTimesStore{Store: store}
	l.store = batches
	first := agentStart()
	first.Time = timestamppb.Now()
	l.append(first) // sets the timer
	time.Sleep(FlushInterval / 2)
	if err := l.flush(context.Background()); err != nil { // as at a message_end
		t.Fatal(err)
	}
	logged := time.Now()
	next := turnStart()
	next.Time = timestamppb.New(logged)
	l.append(next)
	for deadline := time.Now().Add(5 * time.Second); len(batches.stored()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second event was not stored within 5 s: batches %+v", batches.stored())
		}
	}
	time.Sleep(FlushInterval) // no further batch comes
	got := batches.stored()
	if len(got) != 2 || got[0].last != 1 || got[1].last != 2 {
		t.Fatalf("batches = %+v; want one ending at seq 1 (the message_end's) and one at seq 2", got)
	}
	if waited := got[1].at.Sub(logged); waited < FlushInterval-time.Millisecond {
		t.Errorf("the second event was stored %v after it was logged; want FlushInterval (%v)", waited, FlushInterval)
	}
}

// A run whose clock runs ahead still has its events stored by the timer:
// they look younger than FlushInterval for good.
func TestEventLogTimedFlushWithAClockAhead(t *testing.T) {
	l, store := newTestLog(t)
	ahead := timestamppb.New(time.Now().Add(time.Hour))
	first := agentStart()
	first.Time = ahead
	l.append(first)
	if err := l.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	next := turnStart()
	next.Time = ahead
	l.append(next) // sets the timer
	l.append(turnStart())
	time.Sleep(FlushInterval / 2)
	if err := l.flush(context.Background()); err != nil { // as at a message_end
		t.Fatal(err)
	}
	last := turnStart()
	last.Time = ahead
	l.append(last)
	waitStored(t, store, 4)
}

// blockingStore holds every AppendEvents until release is closed.
type blockingStore struct {
	persistence.Store
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) AppendEvents(ctx context.Context, runID string, events []persistence.Event) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.AppendEvents(ctx, runID, events)
}

// A batch that is due because FlushBatch events wait is stored in the
// background: the run goes on streaming while the store writes, until the
// store is maxUnstoredBatches batches behind.
func TestEventLogStoresFullBatchesInTheBackground(t *testing.T) {
	l, store := newTestLog(t)
	blocked := &blockingStore{Store: store, entered: make(chan struct{}, 1), release: make(chan struct{})}
	l.store = blocked
	l.append(agentStart())
	for range FlushBatch - 1 {
		l.append(turnStart())
	}
	select {
	case <-blocked.entered:
	case <-time.After(5 * time.Second):
		t.Fatalf("no batch was started after %d events", FlushBatch)
	}
	// The store is stuck on the first batch; appends go on until the limit.
	appended := make(chan int)
	go func() {
		n := 0
		for range maxUnstoredBatches * FlushBatch {
			l.append(turnStart())
			n++
		}
		appended <- n
	}()
	unstored := func() uint64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.next - 1 - l.durable
	}
	for deadline := time.Now().Add(10 * time.Second); unstored() < maxUnstoredBatches*FlushBatch; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("appends stopped at %d unstored events; want %d before waiting for the store", unstored(), maxUnstoredBatches*FlushBatch)
		}
	}
	select {
	case n := <-appended:
		t.Fatalf("%d appends went through while the store was %d batches behind", n, maxUnstoredBatches)
	case <-time.After(100 * time.Millisecond):
	}
	close(blocked.release)
	select {
	case <-appended:
	case <-time.After(5 * time.Second):
		t.Fatal("appends still wait after the store caught up")
	}
	if err := l.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored, err := store.Events(context.Background(), "r", 0, 10*FlushBatch)
	if err != nil || uint64(len(stored)) != l.next-1 {
		t.Fatalf("stored %d of %d events: %v", len(stored), l.next-1, err)
	}
}

// What appendThen runs before an event is visible is done before any
// follower can read the event.
func TestEventLogRunsBeforeVisibleFirst(t *testing.T) {
	l, _ := newTestLog(t)
	l.append(agentStart())
	inside, release := make(chan struct{}), make(chan struct{})
	go l.appendThen(turnStart(), func() {
		close(inside)
		<-release
	})
	<-inside
	read := make(chan int, 1)
	go func() {
		evs, _, _, _, _, _ := l.since(1)
		read <- len(evs)
	}()
	select {
	case n := <-read:
		t.Fatalf("a follower read %d events while the hook of the second still ran", n)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if n := <-read; n != 1 {
		t.Fatalf("after the hook: %d events past the first, want 1", n)
	}
	l.append(agentEnd())
}
