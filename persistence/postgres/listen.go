package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenerAppName names the listener's connection in pg_stat_activity.
const listenerAppName = "agentd-listener"

// Reconnect backoff of the listener: short at first, since a terminated
// connection usually comes back at once, capped so a database that is
// down is not hammered.
const (
	minReconnectDelay = 50 * time.Millisecond
	maxReconnectDelay = 5 * time.Second
)

// listener holds one dedicated connection that LISTENs on notifyChannel
// and wakes the watchers of the topics named by notifications. After it
// (re)connects it wakes every watcher, since notifications sent while it
// was away are lost.
type listener struct {
	cfg   *pgx.ConnConfig
	log   *slog.Logger
	onLag func(time.Duration)

	mu       sync.Mutex
	watchers map[string]map[*watcher]struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// watcher is one Watch call.
type watcher struct {
	ch chan struct{}
}

func newListener(cfg *pgx.ConnConfig, log *slog.Logger, onLag func(time.Duration)) *listener {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = listenerAppName
	return &listener{cfg: cfg, log: log, onLag: onLag, watchers: map[string]map[*watcher]struct{}{}, done: make(chan struct{})}
}

// start connects and LISTENs once, so that a Watch after Open misses no
// wake-up, then keeps listening in the background until stop.
func (l *listener) start(ctx context.Context) error {
	conn, err := l.connect(ctx)
	if err != nil {
		close(l.done)
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(runCtx, conn)
	return nil
}

// stop ends the background loop and closes its connection.
func (l *listener) stop() {
	if l.cancel != nil {
		l.cancel()
	}
	<-l.done
}

// connect opens the listening connection.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{notifyChannel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

// run receives notifications on conn and reconnects when it breaks.
func (l *listener) run(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	delay := minReconnectDelay
	for {
		if conn != nil {
			err := l.receive(ctx, conn)
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			l.log.Warn("postgres notification listener lost its connection; reconnecting", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		c, err := l.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.log.Warn("postgres notification listener cannot reconnect", "err", err, "retry_in", delay)
			delay = min(2*delay, maxReconnectDelay)
			continue
		}
		delay = minReconnectDelay
		conn = c
		l.log.Info("postgres notification listener reconnected")
		// Whatever was sent while the connection was down is lost: wake
		// everyone to read the store.
		l.wakeAll()
	}
}

// receive dispatches notifications until the connection fails or ctx
// ends.
func (l *listener) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		topics, sent, ok := parsePayload(n.Payload)
		if !ok {
			l.log.Warn("postgres notification with an unknown payload", "payload", n.Payload)
			continue
		}
		if l.onLag != nil {
			l.onLag(time.Since(sent))
		}
		for topic := range strings.SplitSeq(topics, "\n") {
			l.wake(topic)
		}
	}
}

// parsePayload splits "<topics> <unix micros>", where topics are one or
// more topics separated by newlines (see notify.go); topics may hold
// spaces, the time never does.
func parsePayload(p string) (topic string, sent time.Time, ok bool) {
	i := strings.LastIndexByte(p, ' ')
	if i < 0 {
		return "", time.Time{}, false
	}
	us, err := strconv.ParseInt(p[i+1:], 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return p[:i], time.UnixMicro(us), true
}

// wake signals the watchers of topic without blocking: a watcher whose
// buffer is full has a wake-up pending already.
func (l *listener) wake(topic string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watchers[topic] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// wakeAll signals every watcher.
func (l *listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ws := range l.watchers {
		for w := range ws {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// watch registers a watcher of topic.
func (l *listener) watch(topic string) (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1)}
	l.mu.Lock()
	ws := l.watchers[topic]
	if ws == nil {
		ws = map[*watcher]struct{}{}
		l.watchers[topic] = ws
	}
	ws[w] = struct{}{}
	l.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.watchers[topic], w)
			if len(l.watchers[topic]) == 0 {
				delete(l.watchers, topic)
			}
		})
	}
}

// Watch implements persistence.Shared. Wake-ups come from NOTIFYs that
// writes of any Store on the database send when they commit.
func (s *Store) Watch(topic string) (<-chan struct{}, func()) {
	return s.listener.watch(topic)
}
