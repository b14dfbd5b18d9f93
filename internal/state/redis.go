package state

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configure the Redis engine.
type RedisOptions struct {
	// URL is redis://[user:password@]host[:port][/db] or rediss://… for
	// TLS.
	URL string
	// Prefix starts every key and channel; default "viewmux:".
	Prefix string
	// Timeout bounds each command, and each dial; default 1s.
	Timeout time.Duration
	// Logger hears when the server stops answering (a WARN, repeated
	// every WarnEvery while it does not answer) and when it answers
	// again (an INFO). nil = nothing is logged.
	Logger *slog.Logger
	// WarnEvery is how often an outage is logged again; default a
	// minute.
	WarnEvery time.Duration
}

// Redis is the Redis engine (Redis 6.2 or later, or Valkey).
//
// Keys, all under the prefix P:
//
//	P doc:KEY                hash {v: document, m: written at, Unix ms}
//	P changed                the channel every document change is published on, with its key
//	P once:NS:k:KEY          hash {o: owner, v: value}, expiring at its TTL
//	P once:NS:all            sorted set of NS's live keys by expiry
//	P once:NS:o:SHA1(owner)  sorted set of one owner's live keys by expiry
//	P once:NS:last           the newest expiry of NS, so that expiries order puts
//	P rate:SHA1(key)         hash {t: last take, Unix ms; n: tokens left}
//	P lock:NAME              a random token, expiring at the lock's TTL
//
// Scripts read the server's clock (TIME), so replicas whose clocks differ
// agree on expiries and refills. The scripts touch keys they compute, so
// the engine needs one Redis (with replicas or Sentinel behind it, as
// the operator likes), not Redis Cluster.
type Redis struct {
	c       *redis.Client
	prefix  string
	timeout time.Duration
	where   string

	log       *slog.Logger
	warnEvery time.Duration
	warned    time.Time // when the outage was last logged; zero = while up

	mu     sync.Mutex
	health Health

	wake    chan struct{} // a command saw the server go down: the monitor looks now
	stop    chan struct{}
	stopped sync.Once
	done    chan struct{}
}

var quietRedis sync.Once

// OpenRedis connects to the store at o.URL. It does not wait for the
// server: a server that is down now makes the store report itself down,
// and it comes up when the server answers.
func OpenRedis(o RedisOptions) (*Redis, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("state url: %s", redactURLError(err, o.URL))
	}
	if o.Prefix == "" {
		o.Prefix = "viewmux:"
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.WarnEvery <= 0 {
		o.WarnEvery = time.Minute
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = o.Timeout, o.Timeout, o.Timeout
	opt.PoolTimeout = o.Timeout
	opt.MaxRetries = 1
	opt.ContextTimeoutEnabled = true
	// go-redis logs reconnects to stderr on its own; the store reports its
	// health instead (Health), and the gateway logs that.
	quietRedis.Do(func() { redis.SetLogger(discardLogger{}) })
	r := &Redis{
		c:         redis.NewClient(opt),
		prefix:    o.Prefix,
		timeout:   o.Timeout,
		where:     opt.Addr,
		log:       o.Logger,
		warnEvery: o.WarnEvery,
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	if opt.DB != 0 {
		r.where += "/" + strconv.Itoa(opt.DB)
	}
	go r.monitor()
	return r, nil
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// redactURLError keeps a URL's password out of an error about it.
func redactURLError(err error, raw string) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error() // without the URL
	}
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

func (r *Redis) Engine() string { return "redis" }
func (r *Redis) Where() string  { return r.where }

func (r *Redis) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.health
}

func (r *Redis) Close() error {
	r.stopped.Do(func() { close(r.stop) })
	<-r.done
	return r.c.Close()
}

// monitor pings the server: every second while it is down, so that the
// store comes back up without a command to bring it, and every 5 seconds
// while it is up, so that an idle gateway notices an outage.
func (r *Redis) monitor() {
	defer close(r.done)
	wait := time.Duration(0)
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(wait):
		case <-r.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		err := r.c.Ping(ctx).Err()
		cancel()
		r.note(err)
		wait = 5 * time.Second
		if h := r.Health(); !h.Up {
			wait = time.Second
			r.logDown(h)
		} else if !r.warned.IsZero() {
			r.warned = time.Time{}
			r.log.Info("state store answers again", "store", r.where)
		}
	}
}

// logDown logs an outage when it begins, and again every warnEvery while
// it lasts: one line a minute, however many commands fail.
func (r *Redis) logDown(h Health) {
	if now := time.Now(); r.warned.IsZero() || now.Sub(r.warned) >= r.warnEvery {
		r.warned = now
		r.log.Warn("state store is unreachable: pins that cannot be checked are not served, logins cannot be saved or refreshed, stateless approvals fail and rate limits fall back to this replica's share",
			"store", r.where, "since", h.Since.UTC().Format(time.RFC3339), "error", h.Err)
	}
}

// note records what a command's error says of the server: a reply (even
// an error reply) means it is up; anything else, that it is down.
func (r *Redis) note(err error) {
	up := err == nil || errors.Is(err, redis.Nil) || isReply(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if up != r.health.Up || r.health.Since.IsZero() {
		r.health = Health{Up: up, Since: time.Now()}
		if !up {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}
	if !up {
		r.health.Err = err.Error()
	}
}

func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !isNetErr(err)
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrClosed)
}

// do runs one command under the engine's timeout and records the store's
// health; an error that says the server did not answer becomes a
// *DownError.
func (r *Redis) do(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := fn(ctx)
	r.note(err)
	if err != nil && !errors.Is(err, redis.Nil) && !isReply(err) {
		return &DownError{Where: r.where, Err: err}
	}
	return err
}

func (r *Redis) docKey(key string) string { return r.prefix + "doc:" + key }
func (r *Redis) channel() string          { return r.prefix + "changed" }

func (r *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("document", key); err != nil {
		return nil, err
	}
	var b []byte
	err := r.do(ctx, func(ctx context.Context) error {
		var err error
		b, err = r.c.HGet(ctx, r.docKey(key), "v").Bytes()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

// maxUpdateTries bounds the optimistic retries of one Update against
// writers of the same key.
const maxUpdateTries = 64

func (r *Redis) Update(ctx context.Context, key string, fn func(cur []byte) ([]byte, error)) error {
	if err := checkKey("document", key); err != nil {
		return err
	}
	k := r.docKey(key)
	for try := 0; try < maxUpdateTries; try++ {
		var fnErr error
		err := r.do(ctx, func(ctx context.Context) error {
			return r.c.Watch(ctx, func(tx *redis.Tx) error {
				cur, err := tx.HGet(ctx, k, "v").Bytes()
				if errors.Is(err, redis.Nil) {
					cur, err = nil, nil
				}
				if err != nil {
					return err
				}
				next, err := fn(cur)
				if err != nil {
					fnErr = err
					return nil
				}
				if cur != nil && string(cur) == string(next) {
					return nil
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.HSet(ctx, k, "v", next, "m", time.Now().UnixMilli())
					p.Publish(ctx, r.channel(), key)
					return nil
				})
				return err
			}, k)
		})
		if errors.Is(err, redis.TxFailedErr) {
			continue // another writer came first: read again
		}
		if err != nil {
			return err
		}
		if errors.Is(fnErr, ErrUnchanged) {
			return nil
		}
		return fnErr
	}
	return fmt.Errorf("state: document %q: %d writers in a row came first", key, maxUpdateTries)
}

func (r *Redis) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey("document", key); err != nil {
		return false, err
	}
	var n int64
	err := r.do(ctx, func(ctx context.Context) error {
		cmds, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, r.docKey(key))
			p.Publish(ctx, r.channel(), key)
			return nil
		})
		if err == nil {
			n = cmds[0].(*redis.IntCmd).Val()
		}
		return err
	})
	return n > 0, err
}

func (r *Redis) List(ctx context.Context, prefix string) ([]Entry, error) {
	if prefix != "" {
		if err := checkKey("document prefix", prefix); err != nil {
			return nil, err
		}
	}
	var keys []string
	err := r.do(ctx, func(ctx context.Context) error {
		iter := r.c.Scan(ctx, 0, r.docKey(prefix)+"*", 256).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		return iter.Err()
	})
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	var cmds []*redis.StringCmd
	err = r.do(ctx, func(ctx context.Context) error {
		_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmds = cmds[:0]
			for _, k := range keys {
				cmds = append(cmds, p.HGet(ctx, k, "m"))
			}
			return nil
		})
		if errors.Is(err, redis.Nil) {
			err = nil // deleted since the scan
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(keys))
	n := len(r.docKey(""))
	for i, k := range keys {
		ms, err := cmds[i].Int64()
		if err != nil {
			continue
		}
		out = append(out, Entry{Key: k[n:], Modified: time.UnixMilli(ms)})
	}
	slices.SortStableFunc(out, func(a, b Entry) int { return b.Modified.Compare(a.Modified) })
	return out, nil
}

// Watch subscribes to the change channel. It sends "" each time the
// subscription is (re)established: what was published while it was down
// is lost, so a watcher reads again.
func (r *Redis) Watch(ctx context.Context) <-chan string {
	out := newWatchChan(ctx)
	ps := r.c.Subscribe(ctx, r.channel())
	go func() {
		defer out.close()
		defer ps.Close()
		for {
			msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					// Idle: ping, so that a dead connection is found
					// and replaced.
					pctx, cancel := context.WithTimeout(ctx, r.timeout)
					perr := ps.Ping(pctx)
					cancel()
					if perr == nil {
						continue
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					out.send("")
				}
			case *redis.Message:
				if checkKey("document", m.Payload) == nil {
					out.send(m.Payload)
				}
			}
		}
	}()
	return out.c
}

func (r *Redis) onceKeys(ns, owner, key string) (val, all, mine string) {
	base := r.prefix + "once:" + ns + ":"
	return base + "k:" + key, base + "all", base + "o:" + ownerHash(owner)
}

func ownerHash(owner string) string {
	sum := sha1.Sum([]byte(owner))
	return hex.EncodeToString(sum[:])
}

// The scripts' clock is the server's, in milliseconds.
const luaNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// putOnce: KEYS value, all, mine, last; ARGV owner, value, ttl ms, max,
// per owner, key, the prefix of value keys. 0 stored, -1 key in use, -2
// full. The sets are scored by expiry in microseconds, strictly
// increasing (last holds the newest), so an owner's oldest value is the
// lowest score even for two puts in one millisecond.
var putOnce = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local per = tonumber(ARGV[5])
while redis.call('ZCARD', KEYS[3]) >= per do
  local old = redis.call('ZPOPMIN', KEYS[3])
  redis.call('DEL', ARGV[7] .. old[1])
  redis.call('ZREM', KEYS[2], old[1])
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return -2 end
local exp = now + tonumber(ARGV[3]) * 1000
local last = tonumber(redis.call('GET', KEYS[4]) or '0')
if exp <= last then exp = last + 1 end
redis.call('SET', KEYS[4], string.format('%d', exp), 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'v', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], exp, ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], exp, ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 0
`)

// takeOnce: KEYS value, all; ARGV key, the prefix of owner sets. The
// owner and value, or nil.
var takeOnce = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'o', 'v')
if not v[1] then return false end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', ARGV[2] .. redis.sha1hex(v[1]), ARGV[1])
return {v[1], v[2]}
`)

func (r *Redis) PutOnce(ctx context.Context, ns, owner, key string, val []byte, lim Limits) error {
	if err := checkKey("namespace", ns); err != nil {
		return err
	}
	if err := checkKey("once", key); err != nil {
		return err
	}
	lim = lim.withDefaults()
	vk, all, mine := r.onceKeys(ns, owner, key)
	var n int64
	err := r.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = putOnce.Run(ctx, r.c, []string{vk, all, mine, r.prefix + "once:" + ns + ":last"},
			owner, val, lim.TTL.Milliseconds(), lim.Max, lim.PerOwner, key, r.prefix+"once:"+ns+":k:").Int64()
		return err
	})
	switch {
	case err != nil:
		return err
	case n == -1:
		return ErrKeyInUse
	case n == -2:
		return ErrFull
	}
	return nil
}

func (r *Redis) TakeOnce(ctx context.Context, ns, key string) ([]byte, string, bool, error) {
	if checkKey("namespace", ns) != nil || checkKey("once", key) != nil {
		return nil, "", false, nil
	}
	vk, all, _ := r.onceKeys(ns, "", key)
	var res []any
	err := r.do(ctx, func(ctx context.Context) error {
		v, err := takeOnce.Run(ctx, r.c, []string{vk, all}, key, r.prefix+"once:"+ns+":o:").Slice()
		res = v
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, err
	}
	return pair(res)
}

func (r *Redis) PeekOnce(ctx context.Context, ns, key string) ([]byte, string, bool, error) {
	if checkKey("namespace", ns) != nil || checkKey("once", key) != nil {
		return nil, "", false, nil
	}
	vk, _, _ := r.onceKeys(ns, "", key)
	var res []any
	err := r.do(ctx, func(ctx context.Context) error {
		var err error
		res, err = r.c.HMGet(ctx, vk, "o", "v").Result()
		return err
	})
	if err != nil {
		return nil, "", false, err
	}
	return pair(res)
}

// pair reads the owner and value a script or HMGET returned.
func pair(res []any) ([]byte, string, bool, error) {
	if len(res) != 2 || res[0] == nil || res[1] == nil {
		return nil, "", false, nil
	}
	owner, ok1 := res[0].(string)
	val, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return nil, "", false, fmt.Errorf("state: once value of an unexpected type %T, %T", res[0], res[1])
	}
	return []byte(val), owner, true, nil
}

// takeToken: KEYS bucket; ARGV calls per minute. 1 taken, 0 empty.
var takeToken = redis.NewScript(luaNow + `
local cap = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 't', 'n')
local tokens = cap
if b[1] and b[2] then
  tokens = math.min(cap, tonumber(b[2]) + math.max(0, now - tonumber(b[1])) * cap / 60000)
end
local got = math.min(want, math.floor(tokens))
if got < 0 then got = 0 end
tokens = tokens - got
redis.call('HSET', KEYS[1], 't', now, 'n', string.format('%.6f', tokens))
redis.call('PEXPIRE', KEYS[1], 60000)
return got
`)

func (r *Redis) Take(ctx context.Context, key string, perMinute int) (bool, error) {
	n, err := r.TakeUpTo(ctx, key, perMinute, 1)
	return n == 1, err
}

func (r *Redis) TakeUpTo(ctx context.Context, key string, perMinute, want int) (int, error) {
	if want < 1 {
		want = 1
	}
	if perMinute <= 0 || key == "" {
		return want, nil
	}
	k := r.prefix + "rate:" + ownerHash(key)
	var n int64
	err := r.do(ctx, func(ctx context.Context) error {
		var err error
		n, err = takeToken.Run(ctx, r.c, []string{k}, perMinute, want).Int64()
		return err
	})
	return int(n), err
}

// unlockScript deletes a lock only while it holds the caller's token.
var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// lockPoll is how often a waiting Lock tries again.
const lockPoll = 50 * time.Millisecond

func (r *Redis) Lock(ctx context.Context, name string, ttl time.Duration) (func(), error) {
	if err := checkKey("lock", name); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("state lock %s: ttl %v: want > 0", name, ttl)
	}
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	k := r.prefix + "lock:" + name
	for {
		var ok bool
		err := r.do(ctx, func(ctx context.Context) error {
			var err error
			ok, err = r.c.SetNX(ctx, k, token, ttl).Result()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("state lock %s: %w", name, err)
		}
		if ok {
			return func() {
				r.do(context.Background(), func(ctx context.Context) error {
					return unlockScript.Run(ctx, r.c, []string{k}, token).Err()
				})
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("state lock %s: %w", name, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
